"""A small HTTP server on 127.0.0.1 that speaks the parts of OPA's REST API the OPA-server engine uses
(policy API, data API, health), answering with the embedded engine. It lets the tests drive the real
`opa-python-client` code path where no `opa` binary is available."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from policies.engines.rego import (
    UNDEFINED,
    PreparedRego,
    RegoCompileError,
    RegoEvaluationError,
    RegoInput,
    RegorusEngine,
)


class OpaState:
    def __init__(self) -> None:
        self.modules: dict[str, str] = {}
        self.data: dict[str, Any] = {}
        self.prepared: PreparedRego | None = None
        self.lock = threading.Lock()
        self.queries = 0
        self.policy_puts = 0
        self.data_puts = 0

    def compile(self, modules: dict[str, str]) -> None:
        self.prepared = RegorusEngine().prepare(modules, self.data) if modules else None
        self.modules = modules


class _Handler(BaseHTTPRequestHandler):
    state: OpaState

    def log_message(self, format: str, *args: Any) -> None:
        return

    def _send(self, status: int, body: Any | None = None) -> None:
        raw = json.dumps(body).encode() if body is not None else b""
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def _body(self) -> bytes:
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def do_GET(self) -> None:
        if self.path.startswith("/health"):
            self._send(200, {})
        elif self.path.rstrip("/") == "/v1/policies":
            with self.state.lock:
                self._send(200, {"result": [{"id": k, "raw": v} for k, v in self.state.modules.items()]})
        else:
            self._send(404, {"code": "resource_not_found", "message": self.path})

    def do_PUT(self) -> None:
        state = self.state
        if self.path.startswith("/v1/policies/"):
            policy_id = self.path.removeprefix("/v1/policies/")
            source = self._body().decode()
            with state.lock:
                state.policy_puts += 1
                try:
                    state.compile({**state.modules, policy_id: source})
                except RegoCompileError as exc:
                    self._send(400, {
                        "code": "invalid_parameter", "message": "error(s) occurred while compiling module(s)",
                        "errors": [{"code": "rego_parse_error", "message": str(exc)}],
                    })
                    return
            self._send(200, {})
        elif self.path.startswith("/v1/data/"):
            parts = [p for p in self.path.removeprefix("/v1/data/").split("/") if p]
            value = json.loads(self._body() or b"null")
            with state.lock:
                state.data_puts += 1
                node = state.data
                for part in parts[:-1]:
                    node = node.setdefault(part, {})
                node[parts[-1]] = value
                state.compile(dict(state.modules))
            self._send(204)
        else:
            self._send(404, {"code": "resource_not_found", "message": self.path})

    def do_DELETE(self) -> None:
        if self.path.startswith("/v1/policies/"):
            with self.state.lock:
                modules = dict(self.state.modules)
                modules.pop(self.path.removeprefix("/v1/policies/"), None)
                self.state.compile(modules)
            self._send(200, {})
        else:
            self._send(404, {"code": "resource_not_found", "message": self.path})

    def do_POST(self) -> None:
        if not self.path.startswith("/v1/data"):
            self._send(404, {"code": "resource_not_found", "message": self.path})
            return
        path = "data." + ".".join(p for p in self.path.split("?")[0].removeprefix("/v1/data").split("/") if p)
        body = json.loads(self._body() or b"{}")
        with self.state.lock:
            self.state.queries += 1
            prepared = self.state.prepared
        if prepared is None:
            self._send(200, {})
            return
        try:
            value = prepared.query(path.rstrip("."), RegoInput(body.get("input") or {}))
        except RegoEvaluationError as exc:
            self._send(500, {"code": "internal_error", "message": str(exc)})
            return
        self._send(200, {} if value is UNDEFINED else {"result": value})


class OpaRestStub:
    def __init__(self, port: int = 0) -> None:
        """`port` 0 picks a free one; a fixed port lets a test start "OPA" where a webhook already looks for it."""
        self.state = OpaState()
        handler = type("Handler", (_Handler,), {"state": self.state})
        self._server = ThreadingHTTPServer(("127.0.0.1", port), handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> OpaRestStub:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
