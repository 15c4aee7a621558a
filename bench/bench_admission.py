"""Webhook HTTP benchmark: /mutate and /validate against a no-op FastAPI handler on the same server.

The real server (uvicorn, TLS with a CA from certs/, the real runtime over examples/cluster) runs in
its own process; the load generator runs in this one: raw asyncio + ssl, HTTP/1.1 keep-alive, 16
connections, each request written as pre-built bytes and the response read by Content-Length. The
baseline in the same run is a FastAPI route on the same app that reads the body and returns a fixed
small JSON document, so the ratio says what admission adds on top of the HTTP/TLS stack.

The client's own ceiling is measured against a bare asyncio TLS server (canned response, no HTTP
framework) in another process; it must be far above the webhook's rate for the numbers to mean anything.
Where the machine has two or more CPUs the server and the client are pinned to different ones.

`offload` compares running the admission core on the event loop (the default) with a thread pool,
on a runtime without the policy engines (native Rego engines are bound to the thread that built them).
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import os
import socket
import ssl
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

_ROOT = Path(__file__).resolve().parents[1]
if str(_ROOT) not in sys.path:
    sys.path.insert(0, str(_ROOT))

import orjson  # noqa: E402
import yaml  # noqa: E402
from fastapi import APIRouter, Request  # noqa: E402
from starlette.responses import Response  # noqa: E402

CONNECTIONS = 16
ROUNDS = 4
EXAMPLE_POD = _ROOT / "examples" / "pods" / "01-single-type.yaml"
CLUSTER = _ROOT / "examples" / "cluster"
CONFIG = _ROOT / "examples" / "config.yaml"
CANNED = b'{"ok":true}'

# The baseline: an ordinary FastAPI route that reads the body and answers a fixed small JSON document.
NOOP = APIRouter()


@NOOP.post("/noop")
async def noop(request: Request) -> Response:
    await request.body()
    return Response(CANNED, media_type="application/json")


# -- server side (child processes) -------------------------------------------------------------------

def _pin(cpu_index: int) -> None:
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    if len(cpus) >= 2 and os.environ.get("KGWE_BENCH_PIN", "1") != "0":
        os.sched_setaffinity(0, {cpus[cpu_index % len(cpus)]})


def _bound_socket() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(2048)  # connections made before the server starts accepting wait in the backlog
    return sock


def _serve_webhook(cert_dir: str, policies: bool, offload: bool, ports: Any) -> None:
    _pin(0)
    import logging

    from certs.reloader import ReloadingSSLContext
    from webhook.assembly import build_runtime
    from webhook.config import load_config
    from webhook.server.app import create_app
    from webhook.server.listener import uvicorn_server
    from webhook.server.serving import settle_heap

    logging.basicConfig(level=logging.ERROR)
    runtime = build_runtime(load_config(CONFIG), CLUSTER, load_policies=policies)
    tls = ReloadingSSLContext(Path(cert_dir) / "tls.crt", Path(cert_dir) / "tls.key")
    app = create_app(runtime, ui=False, extra_routers=[NOOP], certificate=tls, background=[tls], offload=offload)
    sock = _bound_socket()
    ports.put(sock.getsockname()[1])
    if os.environ.get("KGWE_BENCH_SETTLE_HEAP", "1") != "0":
        settle_heap()  # as kgwe serve's workers do before serving
    uvicorn_server(app, "127.0.0.1", sock.getsockname()[1], tls, log_level="error").run(sockets=[sock])


def _serve_canned(cert_dir: str, ports: Any) -> None:
    """The client's ceiling: a TLS server that answers every request with a fixed response, no framework."""
    _pin(0)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(Path(cert_dir) / "tls.crt", Path(cert_dir) / "tls.key")
    response = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s" % (
        len(CANNED), CANNED)

    class Canned(asyncio.Protocol):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            self.transport: Any = transport  # uvloop's SSL transport is not an asyncio.Transport subclass
            self.buffer = b""

        def data_received(self, data: bytes) -> None:
            self.buffer += data
            while True:
                end = self.buffer.find(b"\r\n\r\n")
                if end < 0:
                    return
                head = self.buffer[:end].lower()
                start = head.find(b"content-length:")
                length = int(head[start + 15:].split(b"\r\n", 1)[0]) if start >= 0 else 0
                if len(self.buffer) < end + 4 + length:
                    return
                self.buffer = self.buffer[end + 4 + length:]
                self.transport.write(response)

    async def main() -> None:
        sock = _bound_socket()
        server = await asyncio.get_running_loop().create_server(Canned, sock=sock, ssl=context)
        ports.put(sock.getsockname()[1])
        await server.serve_forever()

    _run(main())


def _run(coroutine: Any) -> Any:
    try:
        import uvloop

        return uvloop.run(coroutine)
    except ImportError:
        return asyncio.run(coroutine)


# -- client side ---------------------------------------------------------------------------------------

@dataclass
class Run:
    latencies: list[float] = field(default_factory=list)
    errors: int = 0
    seconds: float = 0.0

    def summary(self) -> dict[str, float | int]:
        ordered = sorted(self.latencies)
        count = len(ordered)

        def at(share: float) -> float:
            return ordered[min(count - 1, int(share * count))] * 1000 if count else float("nan")

        return {
            "requests": count,
            "errors": self.errors,
            "req_per_s": count / self.seconds if self.seconds else 0.0,
            "p50_ms": at(0.50),
            "p99_ms": at(0.99),
            "mean_ms": statistics.fmean(ordered) * 1000 if count else float("nan"),
        }


def _request_bytes(path: str, body: bytes) -> bytes:
    return (
        f"POST {path} HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\n\r\n"
    ).encode() + body


async def _connection(port: int, context: ssl.SSLContext, requests: list[bytes], run: Run, stop_at: float,
                      check: Callable[[bytes], bool], offset: int = 0) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context, server_hostname="127.0.0.1")
    position = offset
    try:
        while True:
            started = time.perf_counter()
            if started >= stop_at:
                return
            writer.write(requests[position % len(requests)])
            position += 1
            head = await reader.readuntil(b"\r\n\r\n")
            lower = head.lower()
            start = lower.find(b"content-length:")
            length = int(lower[start + 15:].split(b"\r\n", 1)[0])
            body = await reader.readexactly(length)
            finished = time.perf_counter()
            if head.startswith(b"HTTP/1.1 200") and check(body):
                run.latencies.append(finished - started)
            else:
                run.errors += 1
    finally:
        writer.close()


async def _drive(port: int, ca_file: Path, path: str, body: bytes | list[bytes], seconds: float,
                 check: Callable[[bytes], bool], connections: int = CONNECTIONS,
                 after_warmup: Callable[[], None] | None = None) -> Run:
    """`body` over `connections` connections; a list of bodies is cycled through (each connection from its
    own place in it). `after_warmup` is called between the warm-up and the measured part."""
    context = ssl.create_default_context(cafile=str(ca_file))
    requests = [_request_bytes(path, b) for b in (body if isinstance(body, list) else [body])]
    stride = max(1, len(requests) // connections)
    run = Run()
    # Warm-up: connections, TLS sessions, first-request caches.
    await asyncio.gather(*(_connection(port, context, requests, Run(), time.perf_counter() + 0.5, check, i * stride)
                           for i in range(connections)))
    if after_warmup is not None:
        after_warmup()
    started = time.perf_counter()
    await asyncio.gather(*(_connection(port, context, requests, run, started + seconds, check, i * stride)
                           for i in range(connections)))
    run.seconds = time.perf_counter() - started
    return run


def _admission_ok(body: bytes) -> bool:
    response = orjson.loads(body).get("response") or {}
    return "uid" in response and "allowed" in response


def _any(_body: bytes) -> bool:
    return True


# More distinct pods than any per-snapshot memo holds.
DISTINCT = 4096


def _mutated(pod: dict[str, Any]) -> dict[str, Any]:
    """The pod as KGWE's /mutate leaves it, on the runtime the server runs."""
    from webhook.assembly import build_runtime
    from webhook.config import load_config
    from webhook.review import review_pod

    runtime = build_runtime(load_config(CONFIG), CLUSTER)
    found: dict[str, Any] = review_pod(runtime.admission, pod, "alice", ["team-a"], 10).object or pod
    return found


def _labelled(pod: dict[str, Any], number: int) -> dict[str, Any]:
    metadata = pod.get("metadata") or {}
    return {**pod, "metadata": {**metadata, "labels": {**(metadata.get("labels") or {}), "bench-pod": str(number)}}}


def _cpu_seconds(pid: int) -> float | None:
    """User + system CPU time of a process so far (Linux); None elsewhere."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _measure(process: multiprocessing.process.BaseProcess, port: int, ca_file: Path, path: str,
             body: bytes | list[bytes],
             seconds: float, check: Callable[[bytes], bool], connections: int = CONNECTIONS) -> dict[str, Any]:
    """One measurement, with the server's CPU time per request: on a shared machine req/s follows the CPU
    share the server gets, CPU per request does not."""
    pid = process.pid
    assert pid is not None
    before: list[float | None] = [None]

    def start_counting() -> None:  # after the warm-up: its requests are not counted either
        before[0] = _cpu_seconds(pid)

    run = _run(_drive(port, ca_file, path, body, seconds, check, connections, start_counting))
    after = _cpu_seconds(pid)
    summary: dict[str, Any] = run.summary()
    if before[0] is not None and after is not None and run.latencies:
        # Answers still in flight at the end are a few of thousands.
        summary["server_cpu_ms_per_request"] = (after - before[0]) * 1000 / len(run.latencies)
    return summary


def _merge(slices: list[dict[str, Any]]) -> dict[str, Any]:
    """Rounds of the same measurement combined: req/s over all, latency percentiles as the median of rounds."""
    merged: dict[str, Any] = {
        "requests": sum(s["requests"] for s in slices),
        "errors": sum(s["errors"] for s in slices),
    }
    for key in ("req_per_s", "p50_ms", "p99_ms", "mean_ms", "server_cpu_ms_per_request"):
        values = [s[key] for s in slices if key in s]
        if values:
            merged[key] = statistics.median(values)
    return merged


def _start(target: Callable[..., None], *args: Any) -> tuple[multiprocessing.process.BaseProcess, int]:
    context = multiprocessing.get_context("spawn")
    ports = context.Queue()
    process = context.Process(target=target, args=(*args, ports), daemon=True)
    process.start()
    port = ports.get(timeout=120)
    return process, int(port)


def _stop(process: multiprocessing.process.BaseProcess) -> None:
    process.terminate()
    process.join(10)


def bench_admission(seconds: float = 8) -> dict[str, Any]:
    """Requests per second and latency of /mutate, /validate and a no-op route, `seconds` of load each."""
    from certs.authority import Settings
    from certs.files import ensure_files
    from webhook.review import create_review

    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    _pin(1)
    pod = next(d for d in yaml.safe_load_all(EXAMPLE_POD.read_text()) if d)
    body = orjson.dumps(create_review(pod, "alice", ["team-a"]))
    # /validate gets the pod as KGWE's /mutate left it, as the API server sends it.
    mutated = _mutated(pod)
    validate_body = orjson.dumps(create_review(mutated, "alice", ["team-a"]))
    # Distinct pods: the same pod with a label of its own per request, so nothing planned for one pod is
    # reused for the next (a workload's replicas differ only in their identity, and share plans).
    distinct = {
        "mutate": [orjson.dumps(create_review(_labelled(pod, n), "alice", ["team-a"])) for n in range(DISTINCT)],
        "validate": [orjson.dumps(create_review(_labelled(mutated, n), "alice", ["team-a"])) for n in range(DISTINCT)],
    }
    results: dict[str, Any] = {
        "name": "webhook_admission_http",
        "setup": f"uvicorn over TLS, {CONNECTIONS} keep-alive connections, raw asyncio client in another process, "
                 f"pod {EXAMPLE_POD.name} ({len(body)} bytes AdmissionReview), real runtime over examples/cluster",
        "seconds_per_endpoint": seconds,
        "cpus": cpus,
        "python": sys.version.split()[0],
    }
    with tempfile.TemporaryDirectory(prefix="kgwe-bench-") as tmp:
        paths, _ = ensure_files(Path(tmp), Settings())
        cert_dir = str(paths.directory)

        process, port = _start(_serve_canned, cert_dir)
        try:
            ceiling = _run(_drive(port, paths.ca_cert, "/", body, min(seconds, 3.0), _any))
        finally:
            _stop(process)
        results["client_ceiling"] = ceiling.summary()

        # Interleaved rounds: drift in what else the machine is doing hits every endpoint alike.
        endpoints: tuple[tuple[str, str, Callable[[bytes], bool], bytes | list[bytes]], ...] = (
            ("noop", "/noop", _any, body),
            ("mutate", "/mutate?timeout=10s", _admission_ok, body),
            ("validate", "/validate?timeout=10s", _admission_ok, validate_body),
            ("mutate_distinct", "/mutate?timeout=10s", _admission_ok, distinct["mutate"]),
            ("validate_distinct", "/validate?timeout=10s", _admission_ok, distinct["validate"]),
        )
        slices: dict[str, list[dict[str, Any]]] = {name: [] for name, _, _, _ in endpoints}
        process, port = _start(_serve_webhook, cert_dir, True, False)
        try:
            for _round in range(ROUNDS):
                for name, path, check, bodies in endpoints:
                    slices[name].append(
                        _measure(process, port, paths.ca_cert, path, bodies, seconds / ROUNDS, check)
                    )
            # Latency without queueing: one connection, as Gatekeeper's p50 in issue 17 was measured.
            for name, path, check, bodies in endpoints[:3]:
                results[f"{name}_one_connection"] = _measure(
                    process, port, paths.ca_cert, path, bodies, max(1.0, seconds / ROUNDS), check, connections=1
                )
        finally:
            _stop(process)
        for name, measured in slices.items():
            results[name] = _merge(measured)

        offload: dict[str, Any] = {}
        for mode, threads in (("event_loop", False), ("thread_pool", True)):
            process, port = _start(_serve_webhook, cert_dir, False, threads)
            try:
                offload[mode] = _measure(process, port, paths.ca_cert, "/mutate?timeout=10s", body, seconds / 2,
                                         _admission_ok)
            finally:
                _stop(process)
        results["mutate_without_policies"] = offload

    noop_rate = results["noop"]["req_per_s"]
    for name in ("mutate", "validate", "mutate_distinct", "validate_distinct"):
        results[f"{name}_vs_noop_req_per_s"] = results[name]["req_per_s"] / noop_rate if noop_rate else 0.0
    results["client_ceiling_vs_noop"] = results["client_ceiling"]["req_per_s"] / noop_rate if noop_rate else 0.0
    loop, pool = offload["event_loop"], offload["thread_pool"]
    results["thread_pool_vs_event_loop_req_per_s"] = pool["req_per_s"] / loop["req_per_s"] if loop["req_per_s"] else 0.0
    if loop.get("server_cpu_ms_per_request"):
        results["thread_pool_vs_event_loop_cpu_per_request"] = (
            pool.get("server_cpu_ms_per_request", 0.0) / loop["server_cpu_ms_per_request"]
        )
    names = ("mutate", "validate", "mutate_distinct", "validate_distinct")
    cpu = {name: results[name].get("server_cpu_ms_per_request") for name in ("noop", *names)}
    if cpu["noop"]:
        for name in names:
            results[f"{name}_vs_noop_cpu_per_request"] = (cpu[name] or 0.0) / cpu["noop"]
    return results


if __name__ == "__main__":
    duration = float(sys.argv[1]) if len(sys.argv) > 1 else 8.0
    print(json.dumps(bench_admission(duration), indent=2))
