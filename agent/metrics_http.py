"""The agent's `/metrics` listener, in daemon threads beside the publishing loop.

Two doors (agent/main.py picks one by the address):
- guarded, on any address beyond loopback: HTTPS (agent/metrics_tls.py) and every request checked with the
  API server (agent/metrics_auth.py): no token or an unknown one 401, a token not allowed `get /metrics`
  403, the API server not answering 503, else the series;
- open, on loopback only: plain HTTP without a token, as before SPEC section 13 (a workstation, or a proxy
  of one's own in the same pod).

Bounded whatever clients do: at most `max_connections` at once (more are closed at accept, counted as
`busy`); one request per connection (HTTP/1.0, closed after the answer); the request line and headers at
most MAX_HEADER_BYTES (431 beyond, 100 header lines at most); the TLS handshake and the headers within
`header_seconds`, the whole exchange within `request_seconds` (a watchdog thread shuts down connections past
their deadline, so a client sending a byte a second cannot hold a thread); every socket operation within
IO_SECONDS. Only GET of /metrics answers data; other paths 404, other methods 501.
"""

from __future__ import annotations

import contextlib
import gzip
import ipaddress
import json
import logging
import socket
import ssl
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

from prometheus_client import CollectorRegistry, Counter
from prometheus_client.exposition import choose_encoder

from agent.metrics_auth import METRICS_PATH, MetricsAuth, Verdict
from agent.metrics_tls import ServingTls

log = logging.getLogger("kgwe.agent.metrics")

MAX_CONNECTIONS = 32
MAX_HEADER_BYTES = 32_768
HEADER_SECONDS = 5.0
REQUEST_SECONDS = 30.0
IO_SECONDS = 10.0


def is_loopback(address: str) -> bool:
    """Whether `address` (what --metrics-address names) is only reachable from this host (pod)."""
    if address.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(address.strip("[]")).is_loopback
    except ValueError:
        return False


class _HeadersTooLarge(Exception):
    pass


class _HeaderBudget:
    """The request's reader while the request line and headers are read: at most `limit` bytes in all."""

    def __init__(self, reader: Any, limit: int) -> None:
        self._reader = reader
        self._left = limit

    def readline(self, size: int = -1) -> bytes:
        if self._left <= 0:
            raise _HeadersTooLarge
        wanted = self._left + 1 if size < 0 else min(size, self._left + 1)
        line: bytes = self._reader.readline(wanted)
        self._left -= len(line)
        if self._left < 0:
            raise _HeadersTooLarge
        return line

    def read(self, size: int = -1) -> bytes:
        return b""  # GET has no body to read

    def close(self) -> None:
        self._reader.close()


class _Watchdog:
    """Shuts down the connections past their deadline; one thread for the server."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._deadlines: dict[socket.socket, float] = {}
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="kgwe-agent-metrics-watchdog", daemon=True)
        self._thread.start()

    def watch(self, connection: socket.socket, deadline: float) -> None:
        with self._cond:
            self._deadlines[connection] = deadline
            self._cond.notify()

    def forget(self, connection: socket.socket) -> None:
        with self._cond:
            self._deadlines.pop(connection, None)

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        with self._cond:
            while not self._closed:
                now = time.monotonic()
                late = [c for c, deadline in self._deadlines.items() if deadline <= now]
                for connection in late:
                    del self._deadlines[connection]
                    # The plain socket's shutdown, also under TLS: it wakes the connection's thread out of its
                    # read or write, and never touches the TLS state that thread is using. Closed already: fine.
                    with contextlib.suppress(OSError):
                        socket.socket.shutdown(connection, socket.SHUT_RDWR)
                wait = min(self._deadlines.values(), default=now + 1.0) - now
                self._cond.wait(timeout=max(0.01, min(wait, 1.0)))


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False  # keep no list of finished threads

    def __init__(self, address: tuple[str, int], registry: CollectorRegistry, auth: MetricsAuth | None,
                 tls: ServingTls | None, requests: Counter, *, max_connections: int, header_seconds: float,
                 request_seconds: float) -> None:
        self.address_family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        self.registry = registry
        self.auth = auth
        self.tls = tls
        self.requests = requests
        self.header_seconds = header_seconds
        self.request_seconds = request_seconds
        self.watchdog = _Watchdog()
        self._slots = threading.BoundedSemaphore(max_connections)
        try:
            super().__init__(address, _Handler)
        except OSError:
            self.watchdog.close()
            raise

    def get_request(self) -> tuple[Any, Any]:
        connection, client = self.socket.accept()
        if self.tls is not None:
            # The handshake runs in the connection's thread, bounded there: never in this accepting one.
            connection = self.tls.context().wrap_socket(connection, server_side=True, do_handshake_on_connect=False)
        return connection, client

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            self.requests.labels("busy").inc()
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()

    def handle_error(self, request: Any, client_address: Any) -> None:
        log.debug("/metrics: the connection from %s failed", client_address, exc_info=True)

    def server_close(self) -> None:
        super().server_close()
        self.watchdog.close()


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.0"
    timeout = IO_SECONDS  # every socket operation (StreamRequestHandler sets it on the connection)
    server_version = "kgwe-agent"
    sys_version = ""

    def setup(self) -> None:
        self._started = time.monotonic()
        # What a refusal before the request line is parsed answers with (and logs) needs these.
        self.requestline, self.request_version, self.command = "", "HTTP/1.0", ""
        self.server.watchdog.watch(self.request, self._started + self.server.header_seconds)
        super().setup()
        self.rfile = _HeaderBudget(self.rfile, MAX_HEADER_BYTES)  # type: ignore[assignment]

    def handle(self) -> None:
        try:
            if isinstance(self.connection, ssl.SSLSocket):
                self.connection.do_handshake()
            self.handle_one_request()
        except _HeadersTooLarge:
            self.close_connection = True
            self._answer(431, b"request line and headers too large\n", "text/plain; charset=utf-8")
        except OSError as exc:  # a TLS handshake that failed, a client gone, the watchdog's shutdown
            log.debug("/metrics: connection from %s ended: %s", self.client_address, exc)

    def finish(self) -> None:
        try:
            super().finish()
        except OSError:
            pass
        finally:
            self.server.watchdog.forget(self.request)

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("/metrics %s: " + format, self.client_address[0], *args)

    def do_GET(self) -> None:
        self.server.watchdog.watch(self.request, self._started + self.server.request_seconds)
        if urlsplit(self.path).path != METRICS_PATH:
            self._answer(404, b"only /metrics is served here\n", "text/plain; charset=utf-8")
            return
        if self.server.auth is not None:
            verdict = self.server.auth.check(self.headers.get("Authorization"))
            if verdict.code != 200:
                self.server.requests.labels(verdict.result).inc()
                self._refuse(verdict)
                return
        self.server.requests.labels("allowed" if self.server.auth is not None else "open").inc()
        encoder, content_type = choose_encoder(self.headers.get("Accept", ""))
        try:
            body = encoder(self.server.registry)
        except Exception:  # the collectors do not raise; should one, a 500 and the trace in the log
            log.exception("/metrics: rendering the series failed")
            self._answer(500, b"rendering the series failed; see the agent's log\n", "text/plain; charset=utf-8")
            return
        headers = {}
        if "gzip" in self.headers.get("Accept-Encoding", "").lower():
            body = gzip.compress(body)
            headers["Content-Encoding"] = "gzip"
        self._answer(200, body, content_type, headers)

    def _refuse(self, verdict: Verdict) -> None:
        reason = {401: "Unauthorized", 403: "Forbidden"}.get(verdict.code, "ServiceUnavailable")
        body = json.dumps({"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": verdict.message,
                           "reason": reason, "code": verdict.code}).encode()
        headers = {"Cache-Control": "no-store"}
        if verdict.code == 401:
            headers["WWW-Authenticate"] = 'Bearer realm="kgwe-agent"'
        self._answer(verdict.code, body, "application/json", headers)

    def _answer(self, code: int, body: bytes, content_type: str, headers: dict[str, str] | None = None) -> None:
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(body)


class MetricsServer:
    """`registry` on `address:port`/metrics: guarded with `auth` (over TLS: `tls`, or a self-signed
    certificate when `auth` is given without it), open on plain HTTP without either."""

    def __init__(
        self,
        registry: CollectorRegistry,
        port: int,
        address: str = "127.0.0.1",
        *,
        auth: MetricsAuth | None = None,
        tls: ServingTls | None = None,
        max_connections: int = MAX_CONNECTIONS,
        header_seconds: float = HEADER_SECONDS,
        request_seconds: float = REQUEST_SECONDS,
    ) -> None:
        if auth is None and not is_loopback(address):
            raise ValueError(f"/metrics without a token is served on loopback only, not on {address}")
        if auth is not None and tls is None:
            tls = ServingTls()
        self.registry = registry
        self.tls = tls
        self.requests = Counter("kgwe_agent_metrics_requests_total",
                           "Requests to the agent's /metrics by verdict: allowed, open (loopback, no token), "
                           "unauthenticated, forbidden, unavailable (the API server did not answer), busy "
                           "(connections closed at the cap).", ["result"], registry=registry)
        self._server = _Server((address, port), registry, auth, tls, self.requests, max_connections=max_connections,
                               header_seconds=header_seconds, request_seconds=request_seconds)
        self._thread = threading.Thread(target=self._server.serve_forever, name="kgwe-agent-metrics", daemon=True)
        self._thread.start()

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def scheme(self) -> str:
        return "https" if self.tls is not None else "http"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
        self.registry.unregister(self.requests)
