"""Issue 30's legal-size floods: a normal review's latency while large pods are reviewed at the same time.

`kgwe serve` (the real command, one worker: the one a flood's connections land on) over the example
cluster. N clients each post, back to back, a GPU pod with 40,000 environment variables (about 1.35 MB,
under etcd's 1.5 MiB object limit), to /mutate and /validate in turn; meanwhile one client asks /validate
about a normal GPU pod (the pod as /mutate left it, which must be allowed) every 50 ms. The baseline is
the same normal client against the same server with no flood, measured in the same run.

    python bench/bench_floods.py [SECONDS] [FLOODERS]
"""

from __future__ import annotations

import json
import multiprocessing
import ssl
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))

import soak  # a sibling module of this script

ENV_VARS = 40_000
DEADLINE_SECONDS = 2.5  # limits.deadlineSeconds' default: past it, /validate refuses a GPU pod
SMALL_INTERVAL_SECONDS = 0.05


def large_pod(env_vars: int = ENV_VARS, name: str = "flood") -> dict[str, Any]:
    """A legal GPU pod of about 34 bytes per environment variable."""
    env = [{"name": f"V{i:06d}", "value": f"{i:06d}"} for i in range(env_vars)]
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "team-a", "annotations": {"kgwe.io/accelerator": "nvidia-h100-80gb"}},
        "spec": {"containers": [{"name": "main", "image": "nvcr.io/nvidia/cuda:12.4.0-base", "env": env,
                                 "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
    }


def _review(pod: dict[str, Any]) -> dict[str, Any]:
    from webhook.review import create_review

    review = create_review(pod, "flood", ["team-a"])
    review["request"]["uid"] = soak.UID_PLACEHOLDER
    return review


def _with_uid(body: bytes) -> tuple[str, bytes]:
    uid = str(uuid.uuid4())
    return uid, body.replace(soak.UID_PLACEHOLDER.encode(), uid.encode(), 1)


def validate_body(pod: dict[str, Any]) -> bytes:
    """/validate's body for `pod` as /mutate left it (allowed), as the API server sends it."""
    from webhook.assembly import build_runtime
    from webhook.config import load_config
    from webhook.review import review_pod

    runtime = build_runtime(load_config(soak.CONFIG), soak.CLUSTER)
    reviewed = review_pod(runtime.admission, pod, "flood", ["team-a"], 10)
    assert reviewed.allowed, reviewed.message
    return orjson.dumps(_review(reviewed.object))


def normal_pod() -> dict[str, Any]:
    pod = large_pod(0, "normal")
    pod["spec"]["containers"][0].pop("env")
    return pod


def _client(server: soak.Server) -> httpx.Client:
    context = ssl.create_default_context(cafile=str(server.ca_file))
    return httpx.Client(base_url=f"https://127.0.0.1:{server.port}", verify=context, timeout=30)


def _flood(server: soak.Server, bodies: list[tuple[str, bytes]], stop: Any,
           answered: list[tuple[float, bool]]) -> None:
    with _client(server) as client:
        turn = 0
        while not stop.is_set():
            path, body = bodies[turn % len(bodies)]
            _uid, content = _with_uid(body)
            started = time.perf_counter()
            reply = client.post(path, content=content)
            allowed = reply.status_code == 200 and reply.json()["response"]["allowed"] is True
            answered.append((time.perf_counter() - started, allowed))
            turn += 1


def _flood_process(server: soak.Server, bodies: list[tuple[str, bytes]], flooders: int, stop: Any,
                   results: Any) -> None:
    """The flooding clients, in a process of their own: the measuring client must not wait for their GIL."""
    answered: list[tuple[float, bool]] = []
    threads = [threading.Thread(target=_flood, args=(server, bodies, stop, answered), daemon=True)
               for _ in range(flooders)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    results.put(answered)


def _normal(server: soak.Server, body: bytes, seconds: float) -> dict[str, Any]:
    latencies: list[float] = []
    wrong = 0
    with _client(server) as client:
        client.get("/healthz")
        until = time.monotonic() + seconds
        while time.monotonic() < until:
            uid, content = _with_uid(body)
            started = time.perf_counter()
            reply = client.post("/validate?timeout=10s", content=content)
            latencies.append(time.perf_counter() - started)
            response = reply.json().get("response", {}) if reply.status_code == 200 else {}
            if response.get("uid") != uid or response.get("allowed") is not True:
                wrong += 1
            time.sleep(SMALL_INTERVAL_SECONDS)
    latencies.sort()
    return {
        "requests": len(latencies),
        "wrong_answers": wrong,
        "p50_ms": latencies[len(latencies) // 2] * 1000 if latencies else None,
        "p99_ms": latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))] * 1000 if latencies else None,
        "max_ms": latencies[-1] * 1000 if latencies else None,
        "past_deadline": sum(1 for s in latencies if s > DEADLINE_SECONDS),
    }


def bench_floods(seconds: float = 8.0, flooders: int = 8) -> dict[str, Any]:
    normal = validate_body(normal_pod())
    large = orjson.dumps(_review(large_pod()))
    bodies = [("/mutate?timeout=10s", large), ("/validate?timeout=10s", validate_body(large_pod()))]
    results: dict[str, Any] = {
        "name": "legal_size_floods",
        "setup": f"kgwe serve --workers 1; {flooders} clients posting a {len(large) / 1e6:.2f} MB GPU pod "
                 f"({ENV_VARS} env vars) to /mutate and /validate back to back; one client asking /validate "
                 f"about a normal GPU pod every {SMALL_INTERVAL_SECONDS * 1000:.0f} ms",
        "large_body_bytes": len(large),
    }
    with soak.kgwe_serve(workers=1) as server:
        results["quiet"] = _normal(server, normal, min(seconds, 3.0))
        context = multiprocessing.get_context("fork")
        stop, queue = context.Event(), context.Queue()
        flood = context.Process(target=_flood_process, args=(server, bodies, flooders, stop, queue), daemon=True)
        flood.start()
        time.sleep(1.0)  # the flood under way
        try:
            results["flooded"] = _normal(server, normal, seconds)
        finally:
            stop.set()
            answered: list[tuple[float, bool]] = sorted(queue.get(timeout=60))
            flood.join(30)
        results["large"] = {
            "answered": len(answered),
            # The large pods are legal and allowed when judged; a refusal is a deadline failure (fail closed).
            "allowed": sum(1 for _seconds, allowed in answered if allowed),
            "p50_ms": answered[len(answered) // 2][0] * 1000 if answered else None,
            "max_ms": answered[-1][0] * 1000 if answered else None,
        }
    return results


if __name__ == "__main__":
    args = sys.argv[1:]
    print(json.dumps(bench_floods(float(args[0]) if args else 8.0, int(args[1]) if len(args) > 1 else 8), indent=2))
