"""What every fault test does: ask the real webhook app (HTTP shell + admission core) about a pod."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import jsonpatch
import orjson
from ports import free_port

from webhook.review import create_review
from webhook.server.admission_endpoint import ServingRuntime
from webhook.server.app import create_app

ROOT = Path(__file__).resolve().parents[2]
CLUSTER = ROOT / "examples" / "cluster"
CONFIG = ROOT / "examples" / "config.yaml"


def gpu_pod(name: str, type_id: str, gpus: int = 1, namespace: str = "team-a",
            annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace,
                     "annotations": {"kgwe.io/accelerator": type_id, **(annotations or {})}},
        "spec": {"containers": [{"name": "main", "image": "nvcr.io/nvidia/cuda:12.4.0-base",
                                 "resources": {"limits": {"nvidia.com/gpu": str(gpus), "memory": "16Gi"}}}]},
    }


class Webhook:
    """The webhook app on a runtime, called over ASGI as uvicorn calls it (no socket, no TLS)."""

    def __init__(self, runtime: ServingRuntime) -> None:
        self.app = create_app(runtime, ui=False)

    def post(self, url: str, body: bytes) -> httpx.Response:
        async def send() -> httpx.Response:
            transport = httpx.ASGITransport(app=self.app)
            async with httpx.AsyncClient(transport=transport, base_url="https://kgwe.test") as client:
                return await client.post(url, content=body, headers={"content-type": "application/json"})

        return asyncio.run(send())

    def ask(self, endpoint: str, pod: dict[str, Any], *, timeout: str = "10s", user: str = "alice",
            groups: tuple[str, ...] = ("team-a",)) -> dict[str, Any]:
        review = create_review(pod, user, list(groups))
        reply = self.post(f"/{endpoint}?timeout={timeout}", orjson.dumps(review))
        assert reply.status_code == 200, reply.text
        response: dict[str, Any] = reply.json()["response"]
        assert response["uid"] == review["request"]["uid"]
        return response

    def mutated(self, pod: dict[str, Any], **kwargs: Any) -> tuple[dict[str, Any], dict[str, Any]]:
        """The mutating answer and the pod with its patch applied."""
        response = self.ask("mutate", pod, **kwargs)
        patch = orjson.loads(base64.b64decode(response["patch"])) if "patch" in response else []
        return response, jsonpatch.apply_patch(create_review(pod, "x", [])["request"]["object"], patch)


class Served:
    """`kgwe serve --cluster DIR` in its own process, asked over HTTPS with the CA it made."""

    def __init__(self, directory: Path, state: Path, *extra: str) -> None:
        self.port = free_port()
        env = {**os.environ, "PYTHONPATH": str(ROOT), "KGWE_STATE_DIR": str(state)}
        state.mkdir(parents=True, exist_ok=True)
        self.log = state / "serve.log"  # a file, not a pipe: a pipe nobody reads would block the server's logging
        with open(self.log, "wb") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "webhook.cli", "serve", "--cluster", str(directory), "--host", "127.0.0.1",
                 "--port", str(self.port), "--workers", "1", "--no-ui", *extra],
                env=env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
            )
        self.ca = state / "certs" / "ca.crt"

    def client(self) -> httpx.Client:
        return httpx.Client(base_url=f"https://127.0.0.1:{self.port}", verify=str(self.ca), timeout=20)

    def up(self) -> bool:
        assert self.process.poll() is None, "kgwe serve exited"
        try:
            with self.client() as client:
                client.get("/healthz")
        except (httpx.TransportError, OSError):
            return False
        return True

    def readyz(self) -> tuple[int, dict[str, Any]]:
        with self.client() as client:
            reply = client.get("/readyz")
        return reply.status_code, reply.json()

    def problems(self) -> str:
        return "\n".join(self.readyz()[1].get("problems", []))

    def metric(self, name: str, labels: str = "") -> float | None:
        """A sample of /metrics, e.g. metric("kgwe_policy_engine_up", '{engine="opa"}')."""
        with self.client() as client:
            text = client.get("/metrics").text
        for line in text.splitlines():
            if line.startswith(name + labels + " "):
                return float(line.split()[-1])
        return None

    def quotas_of(self, tenant: str) -> list[str]:
        with self.client() as client:
            tenants = client.get("/api/v1/tenants").json()["tenants"]
        return next((t["quotas"] for t in tenants if t["tenant"] == tenant), [])

    def ask(self, endpoint: str, pod: dict[str, Any]) -> dict[str, Any]:
        with self.client() as client:
            reply = client.post(f"/{endpoint}?timeout=10s", content=orjson.dumps(create_review(pod, "alice", [])))
        assert reply.status_code == 200, reply.text
        response: dict[str, Any] = reply.json()["response"]
        return response

    def validate(self, pod: dict[str, Any]) -> dict[str, Any]:
        """/mutate, its patch applied, then /validate: what the API server does."""
        mutated = self.ask("mutate", pod)
        patch = orjson.loads(base64.b64decode(mutated["patch"])) if "patch" in mutated else []
        return self.ask("validate", jsonpatch.apply_patch(create_review(pod, "x", [])["request"]["object"], patch))

    def stop(self) -> str:
        """Stop the server; its log."""
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        return self.log.read_text(errors="replace")


class ReviewServer:
    """SubjectAccessReviews on 127.0.0.1, each answered `allowed` once `hold()` returns (a slow or a held
    API server). `received` counts them; `asked` is set by the first."""

    def __init__(self, hold: Callable[[], object]) -> None:
        self.received = 0
        self.asked = threading.Event()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                owner.received += 1
                owner.asked.set()
                hold()
                data = json.dumps({**body, "status": {"allowed": True}}).encode()
                try:
                    self.send_response(201)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the webhook stopped waiting, as it should

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def running(self) -> Iterator[ReviewServer]:
        """Serve from a thread for as long as the caller holds the generator open."""
        thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)
        thread.start()
        try:
            yield self
        finally:
            self.server.shutdown()
            self.server.server_close()
