"""What every fault test does: ask the real webhook app (HTTP shell + admission core) about a pod."""

from __future__ import annotations

import asyncio
import base64
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import jsonpatch
import orjson

from webhook.review import create_review
from webhook.server.app import ServingRuntime, create_app

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


def eventually(check: Callable[[], bool], timeout: float = 10.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not reached within {timeout}s")
        time.sleep(0.02)
