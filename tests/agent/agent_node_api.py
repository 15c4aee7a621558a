"""A minimal Kubernetes Node API on 127.0.0.1: GET and PATCH (JSON merge patch) of one Node, and a list of
ResourceSlices (field selector `spec.nodeName`), every request recorded.

The agent's real `kubernetes` client talks to it over HTTP, so what is tested is the request the API server
would receive: method, path, query (fieldManager), content type and body.
"""

from __future__ import annotations

import copy
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

NODES = "/api/v1/nodes/"
RESOURCE_SLICES = "/apis/resource.k8s.io/v1/resourceslices"


@dataclass
class Recorded:
    method: str
    path: str
    query: dict[str, str]
    content_type: str
    body: Any = None


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


@dataclass
class NodeApi:
    node: dict[str, Any]
    requests: list[Recorded] = field(default_factory=list)
    # ResourceSlices served at RESOURCE_SLICES; None: the API serves no resource.k8s.io/v1 (404).
    slices: list[dict[str, Any]] | None = None
    # Status codes to answer instead of serving, one per request, first first.
    failures: list[int] = field(default_factory=list)
    url: str = ""
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def patches(self) -> list[Recorded]:
        return [r for r in self.requests if r.method == "PATCH"]

    def handle(self, method: str, raw_path: str, content_type: str, body: bytes) -> tuple[int, dict[str, Any]]:
        parts = urlsplit(raw_path)
        query = {k: v[0] for k, v in parse_qs(parts.query).items()}
        parsed = json.loads(body) if body else None
        with self.lock:
            self.requests.append(Recorded(method, parts.path, query, content_type, parsed))
            if self.failures:
                code = self.failures.pop(0)
                return code, _status(code, "injected failure")
            if parts.path == RESOURCE_SLICES and method == "GET" and self.slices is not None:
                wanted = query.get("fieldSelector", "").removeprefix("spec.nodeName=")
                items = [s for s in self.slices if not wanted or s.get("spec", {}).get("nodeName") == wanted]
                return 200, {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSliceList",
                             "metadata": {}, "items": copy.deepcopy(items)}
            name = self.node["metadata"]["name"]
            if parts.path != NODES + name:
                return 404, _status(404, f'nodes "{parts.path.rsplit("/", 1)[-1]}" not found')
            if method == "PATCH":
                if content_type != "application/merge-patch+json":
                    return 415, _status(415, f"unsupported patch type {content_type}")
                self.node = merge_patch(self.node, parsed)
                version = int(self.node["metadata"].get("resourceVersion", "1")) + 1
                self.node["metadata"]["resourceVersion"] = str(version)
            return 200, copy.deepcopy(self.node)


def _status(code: int, message: str) -> dict[str, Any]:
    return {"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": message, "code": code}


def node(name: str, labels: dict[str, str] | None = None, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "resourceVersion": "1", "labels": dict(labels or {}),
                     "annotations": dict(annotations or {})},
        "status": {},
    }


@contextmanager
def serving(api: NodeApi) -> Iterator[NodeApi]:
    class Handler(BaseHTTPRequestHandler):
        def _serve(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            content_type = (self.headers.get("Content-Type") or "").split(";")[0].strip()
            code, payload = api.handle(self.command, self.path, content_type, body)
            data = json.dumps(payload).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = _serve
        do_PATCH = _serve

        def log_message(self, format: str, *args: Any) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    api.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    try:
        yield api
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
