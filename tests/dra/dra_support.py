"""DRA test support: the DRA example cluster served by the real app over TLS on 127.0.0.1, templates
created in the fake API server, AdmissionReviews as kube-apiserver sends them."""

from __future__ import annotations

import base64
import ssl
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import jsonpatch
import orjson
from fastapi import FastAPI
from kube_fake_apiserver import FakeApiServer
from kubernetes import client as k8s_client
from server_support import CLIENT_TIMEOUT_SECONDS, admission_review, start_server

from certs.authority import Settings
from certs.files import CertificatePaths, ensure_files
from certs.reloader import ReloadingSSLContext
from webhook.assembly import build_runtime
from webhook.cluster.kube_json import KubeJson
from webhook.config import load_config
from webhook.dra.templates import KubeTemplateWriter
from webhook.server.app import create_app

ROOT = Path(__file__).resolve().parents[2]
DRA_CLUSTER = ROOT / "examples" / "cluster-dra"


def review(pod: dict[str, Any], *, dry_run: bool = False, operation: str = "CREATE") -> dict[str, Any]:
    """An AdmissionReview for a pod exactly as kube-apiserver posts it, in the pod's namespace."""
    namespace = (pod.get("metadata") or {}).get("namespace", "default")
    return admission_review(pod, operation=operation, dry_run=dry_run, namespace=namespace)


def gpu_pod(name: str, annotations: dict[str, str], gpus: int = 1, namespace: str = "default") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "annotations": dict(annotations)},
        "spec": {
            "containers": [
                {"name": "main", "image": "nvcr.io/nvidia/pytorch:25.01-py3",
                 "resources": {"limits": {"nvidia.com/gpu": str(gpus), "memory": "32Gi"}}},
                {"name": "sidecar", "image": "busybox", "resources": {"limits": {"memory": "64Mi"}}},
            ],
        },
    }


@dataclass
class Webhook:
    """The real app over HTTPS."""

    url: str
    ca_file: Path

    def ask(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        context = ssl.create_default_context(cafile=str(self.ca_file))
        with httpx.Client(base_url=self.url, verify=context, timeout=CLIENT_TIMEOUT_SECONDS) as client:
            response = client.post(f"{path}?timeout=10s", content=orjson.dumps(body))
        assert response.status_code == 200, response.text
        answer: dict[str, Any] = response.json()["response"]
        assert answer["uid"] == body["request"]["uid"]
        return answer

    def mutate(self, pod: dict[str, Any], dry_run: bool = False) -> tuple[dict[str, Any], dict[str, Any]]:
        """The mutating answer and the pod after its patch."""
        answer = self.ask("/mutate", review(pod, dry_run=dry_run))
        patch = orjson.loads(base64.b64decode(answer["patch"])) if answer.get("patch") else []
        return answer, jsonpatch.apply_patch(pod, patch) if patch else pod

    def validate(self, pod: dict[str, Any], dry_run: bool = False) -> dict[str, Any]:
        return self.ask("/validate", review(pod, dry_run=dry_run))

    def create(self, pod: dict[str, Any], dry_run: bool = False) -> tuple[dict[str, Any], dict[str, Any]]:
        """Both webhooks as the API server chains them: (final pod, validating answer)."""
        _answer, final = self.mutate(pod, dry_run)
        return final, self.validate(final, dry_run)


def serve(make_app: Callable[[], FastAPI], directory: Path) -> Iterator[Webhook]:
    """Serve the app from a thread (tests/server's `start_server`: built there, as native policy engines
    are bound to their thread)."""
    paths: CertificatePaths = ensure_files(directory, Settings(service="kgwe-webhook", namespace="kgwe"))[0]
    tls = ReloadingSSLContext(paths.tls_cert, paths.tls_key, poll_seconds=0.05)
    running = start_server(make_app, paths, tls)
    server = next(running)
    try:
        yield Webhook(server.url, server.ca_file)
    finally:
        running.close()


def serve_replica(dra_dir: Path, fake_api: FakeApiServer, certs: Path) -> Iterator[Webhook]:
    """One webhook replica over HTTPS, writing its templates to `fake_api` (each replica remembers its own)."""
    configuration = k8s_client.Configuration()
    configuration.host = fake_api.url
    api = k8s_client.ApiClient(configuration)

    def make_app() -> object:
        runtime = build_runtime(load_config(dra_dir / "config.yaml"), dra_dir / "cluster")
        runtime.claim_templates = KubeTemplateWriter(KubeJson(api))
        return create_app(runtime, ui=False)

    try:
        yield from serve(make_app, certs)  # type: ignore[arg-type]
    finally:
        api.close()
