"""The real webhook (HTTP shell + admission core + example cluster) over HTTPS on 127.0.0.1, asked as the
API server asks it: the guarantees of docs/security.md are tested against exactly what `kgwe serve` runs."""

from __future__ import annotations

import base64
import copy
import json
import ssl
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import jsonpatch
import orjson
import pytest
from fastapi import FastAPI
from server_support import admission_review, start_server

from certs.authority import Settings
from certs.files import ensure_files
from certs.reloader import ReloadingSSLContext
from webhook.assembly import build_runtime
from webhook.config import load_config
from webhook.runtime import Runtime
from webhook.server.app import create_app

ROOT = Path(__file__).resolve().parents[2]
CLUSTER = ROOT / "examples" / "cluster"
CONFIG = ROOT / "examples" / "config.yaml"


def review(
    obj: dict[str, Any],
    *,
    operation: str = "CREATE",
    old: dict[str, Any] | None = None,
    user: str = "alice",
    groups: tuple[str, ...] = ("team-a", "system:authenticated"),
    dry_run: bool = False,
) -> dict[str, Any]:
    """An AdmissionReview as kube-apiserver sends it for a pod CREATE or UPDATE."""
    namespace = obj.get("metadata", {}).get("namespace", "team-a")
    return admission_review(
        obj, operation=operation, old=old, dry_run=dry_run, namespace=namespace,
        user=user, user_uid="u-" + user, groups=groups, extra={},
    )


def gpu_pod(name: str = "train", namespace: str = "team-a", gpus: int | str = 1,
            annotations: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "annotations": dict(annotations or {})},
        "spec": {"containers": [{"name": "main", "image": "nvcr.io/nvidia/pytorch:24.05-py3",
                                 "resources": {"limits": {"nvidia.com/gpu": str(gpus), "memory": "32Gi"}}}],
                 **spec},
    }


@dataclass
class Webhook:
    url: str
    ca_file: Path
    runtime: Runtime

    def client(self) -> httpx.Client:
        return httpx.Client(base_url=self.url, verify=ssl.create_default_context(cafile=str(self.ca_file)),
                            timeout=30)

    def post(self, endpoint: str, body: dict[str, Any] | bytes, timeout: str = "10s") -> httpx.Response:
        # The standard library writes any nesting (orjson stops at 254 levels): bodies as hostile as needed.
        content = body if isinstance(body, bytes) else json.dumps(body).encode()
        with self.client() as client:
            return client.post(f"/{endpoint}?timeout={timeout}", content=content,
                               headers={"content-type": "application/json"})

    def ask(self, endpoint: str, body: dict[str, Any] | bytes, timeout: str = "10s") -> dict[str, Any]:
        reply = self.post(endpoint, body, timeout)
        assert reply.status_code == 200, reply.text
        answer: dict[str, Any] = reply.json()["response"]
        return answer

    def mutate(self, obj: dict[str, Any], **kwargs: Any) -> tuple[dict[str, Any], dict[str, Any]]:
        """The mutating answer and the object with its patch applied."""
        answer = self.ask("mutate", review(obj, **kwargs))
        patch = orjson.loads(base64.b64decode(answer["patch"])) if "patch" in answer else []
        return answer, jsonpatch.apply_patch(copy.deepcopy(obj), patch)

    def admit(self, obj: dict[str, Any], **kwargs: Any) -> tuple[dict[str, Any], dict[str, Any]]:
        """What the API server does: /mutate, then /validate on the mutated object."""
        _answer, mutated = self.mutate(obj, **kwargs)
        return self.ask("validate", review(mutated, **kwargs)), mutated


def serve(make_runtime: Callable[[], Runtime], tmp: Path) -> Iterator[Webhook]:
    """The real app over HTTPS (tests/server's `start_server`), its runtime built on the serving thread as
    `kgwe serve` builds it: native engines are bound to their thread."""
    paths, _ = ensure_files(tmp / "certs", Settings(service="kgwe-webhook", namespace="kgwe"))
    tls = ReloadingSSLContext(paths.tls_cert, paths.tls_key)
    made: list[Runtime] = []

    def make_app() -> FastAPI:
        made.append(make_runtime())
        return create_app(made[0], ui=False, certificate=tls, background=[tls])

    running = start_server(make_app, paths, tls)
    server = next(running)
    try:
        yield Webhook(server.url, server.ca_file, made[0])
    finally:
        running.close()


@pytest.fixture
def webhook(tmp_path: Path) -> Iterator[Webhook]:
    yield from serve(lambda: build_runtime(load_config(CONFIG), CLUSTER), tmp_path)


@pytest.fixture
def serve_cluster(tmp_path: Path) -> Callable[[Path], Iterator[Webhook]]:
    """Serve another cluster directory (a modified copy of the example)."""
    return lambda directory: serve(lambda: build_runtime(load_config(CONFIG), directory), tmp_path)
