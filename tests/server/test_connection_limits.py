"""Connection limits of the HTTPS listener, over real TLS on 127.0.0.1 with short limits.

Each test waits for the server to act (a closed socket reads as EOF) with a generous bound; nothing
asserts how fast anything is.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import ssl
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import orjson
import pytest
from prometheus_client import REGISTRY
from server_support import GPU_POD, FakeRuntime, RunningServer, admission_review, start_server

from certs.files import CertificatePaths
from certs.reloader import ReloadingSSLContext
from webhook.server.app import create_app
from webhook.server.transport import ConnectionLimits

# The phase a test is about gets SHORT seconds; every other phase gets LONG, longer than the test's patience:
# only the timer under test can close the connection, however late a busy machine runs the test's client
# (a client descheduled for a second between its handshake and its first bytes would otherwise meet the idle
# timer instead of the header timer it came to meet), and a timer under test that never fires still fails.
SHORT = 1.0
# How long a test waits for the server to close a connection it should close (far above SHORT).
PATIENCE = 15.0
LONG = 4 * PATIENCE
PHASES = ("idle", "handshake", "header", "body")
# A test whose premise a busy machine can spoil (a request sent before a short timer fires) tries again.
ATTEMPTS = 5


def closed(reason: str) -> float:
    return REGISTRY.get_sample_value("kgwe_connections_closed_total", {"reason": reason}) or 0.0


def open_connections() -> float:
    return REGISTRY.get_sample_value("kgwe_open_connections") or 0.0


def short(*phases: str) -> ConnectionLimits:
    """Limits with SHORT seconds for `phases` and LONG for the others."""
    assert set(phases) <= set(PHASES)
    seconds = {f"{phase}_timeout": SHORT if phase in phases else LONG for phase in PHASES}
    return ConnectionLimits(**seconds, max_connections=40)


Serve = Callable[[ConnectionLimits], RunningServer]


@pytest.fixture
def serve_limited(cert_paths: CertificatePaths) -> Iterator[Serve]:
    """Starts a server with the limits given; each is stopped at the end of the test."""
    with contextlib.ExitStack() as stack:
        def serve(limits: ConnectionLimits) -> RunningServer:
            runtime = FakeRuntime()
            tls = ReloadingSSLContext(cert_paths.tls_cert, cert_paths.tls_key, poll_seconds=0.05)
            running = start_server(
                lambda: create_app(runtime, ui=False, certificate=tls, background=[tls]), cert_paths, tls, limits
            )
            server = next(running)
            stack.callback(running.close)
            return server

        yield serve


def port_of(server: RunningServer) -> int:
    return int(server.url.rsplit(":", 1)[1])


def tls_connect(server: RunningServer) -> ssl.SSLSocket:
    return server.tls_socket(PATIENCE)


def wait_closed(sock: socket.socket) -> bool:
    """True when the server closes `sock` (EOF or reset) within PATIENCE; False when it stays open."""
    sock.settimeout(PATIENCE)
    try:
        while True:
            data = sock.recv(4096)
            if not data:
                return True
    except (ConnectionResetError, BrokenPipeError, ssl.SSLError, ssl.SSLEOFError):
        return True
    except TimeoutError:
        return False


def eventually(check: object, what: str) -> None:
    give_up = time.monotonic() + PATIENCE
    while not check():  # type: ignore[operator]
        assert time.monotonic() < give_up, what
        time.sleep(0.02)


@pytest.fixture
def flood_target(cert_paths: CertificatePaths) -> Iterator[RunningServer]:
    """Room for a whole flood to arrive inside one idle period, so the cap is what turns connections away."""
    runtime = FakeRuntime()
    tls = ReloadingSSLContext(cert_paths.tls_cert, cert_paths.tls_key, poll_seconds=0.05)
    limits = ConnectionLimits(idle_timeout=5.0, handshake_timeout=5.0, header_timeout=5.0, body_timeout=5.0,
                              max_connections=FLOOD_CAP)
    yield from start_server(
        lambda: create_app(runtime, ui=False, certificate=tls, background=[tls]), cert_paths, tls, limits
    )


FLOOD_CAP = 40


def test_idle_connection_flood_is_capped_and_every_idle_connection_closed(flood_target: RunningServer) -> None:
    base = open_connections()
    over_limit, idle = closed("over_limit"), closed("idle")
    flood: list[ssl.SSLSocket] = []
    most = 0.0
    try:
        for _ in range(3 * FLOOD_CAP):
            # A connection over the cap may already be closed during the handshake's last step.
            with contextlib.suppress(OSError, ssl.SSLError):
                flood.append(tls_connect(flood_target))
            most = max(most, open_connections() - base)
        assert most <= FLOOD_CAP
        assert all(wait_closed(sock) for sock in flood)
    finally:
        for sock in flood:
            sock.close()
    eventually(lambda: open_connections() <= base, "the server still holds connections")
    # Every connection was closed by the server: for being over the cap, or for idling.
    refused = closed("over_limit") - over_limit
    assert refused >= 1
    assert refused + closed("idle") - idle >= len(flood)
    # The server still answers afterwards.
    with flood_target.client() as client:
        assert client.get("/healthz").status_code == 200


def test_connection_that_never_sends_a_request_is_closed(serve_limited: Serve) -> None:
    sock = tls_connect(serve_limited(short("idle")))
    with sock:
        assert wait_closed(sock)


def test_tcp_connection_that_never_starts_tls_is_closed(serve_limited: Serve) -> None:
    server = serve_limited(short("handshake"))
    with socket.create_connection(("127.0.0.1", port_of(server)), timeout=PATIENCE) as sock:
        assert wait_closed(sock)


def test_keep_alive_connection_is_closed_after_the_idle_timeout(serve_limited: Serve) -> None:
    server = serve_limited(short("idle"))
    # The idle timer also runs from the handshake to the first request (the same allowance), so a client a
    # busy machine holds back past it finds its connection closed before it asks: it asks again on a new one.
    for _ in range(ATTEMPTS):
        with tls_connect(server) as sock:
            try:
                sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
                answer = sock.recv(4096)
            except OSError:  # ssl.SSLError is one
                answer = b""
            if b"200 OK" in answer:
                assert wait_closed(sock)
                return
    pytest.fail(f"the server closed each of {ATTEMPTS} connections before its request was answered")


def test_slow_headers_are_cut_off(serve_limited: Serve) -> None:
    server = serve_limited(short("header"))
    before = closed("header_timeout")
    with tls_connect(server) as sock:
        sock.sendall(b"POST /validate HTTP/1.1\r\nHost: x\r\n")  # and never the end of the headers
        assert wait_closed(sock)
    assert closed("header_timeout") == before + 1


def test_slow_headers_after_an_answered_request_are_cut_off(serve_limited: Serve) -> None:
    """The wait between requests (a long phase) does not hold back the header timer of the next request: the
    connection's one timer never waits past the shortest phase (webhook/server/transport.py)."""
    server = serve_limited(short("header"))
    before = closed("header_timeout")
    with tls_connect(server) as sock:
        sock.sendall(b"POST /validate HTTP/1.1\r\nHost: x\r\ncontent-length: %d\r\n\r\n%s" % (
            len(body := orjson.dumps(admission_review(GPU_POD))), body))
        assert b"200 OK" in sock.recv(1 << 16)
        sock.sendall(b"POST /validate HTTP/1.1\r\nHost: x\r\n")  # and never the end of the headers
        assert wait_closed(sock)
    assert closed("header_timeout") == before + 1


class Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def server_logs() -> Iterator[Records]:
    """Everything the server logs, uvicorn's loggers (which do not propagate to the root) included."""
    handler = Records()
    loggers = [logging.getLogger(name) for name in ("", "uvicorn", "uvicorn.error", "webhook", "kgwe")]
    for logger in loggers:
        logger.addHandler(handler)
    yield handler
    for logger in loggers:
        logger.removeHandler(handler)


def no_tracebacks(handler: Records) -> None:
    noisy = [r for r in handler.records if r.exc_info or r.levelno >= logging.ERROR]
    assert not noisy, [r.getMessage() for r in noisy]


def partial_body_request(length: int, sent: int) -> bytes:
    body = orjson.dumps(admission_review(GPU_POD))
    body = body + b" " * max(0, length - len(body))
    head = f"POST /validate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {length}\r\n\r\n"
    return head.encode() + body[:sent]


def finished(server: RunningServer) -> None:
    """Wait until the server holds no connection and runs no request: what it logs about them is logged."""
    assert server.uvicorn is not None
    state = server.uvicorn.server_state
    eventually(lambda: not state.connections and not state.tasks, "the server is still busy with a connection")


def test_slow_body_is_cut_off_without_a_traceback(serve_limited: Serve, server_logs: Records) -> None:
    server = serve_limited(short("body"))
    before = closed("body_timeout")
    with tls_connect(server) as sock:
        sock.sendall(partial_body_request(4000, 100))
        assert wait_closed(sock)
    assert closed("body_timeout") == before + 1
    finished(server)  # the request task has seen the disconnect and ended
    no_tracebacks(server_logs)


def test_aborted_body_leaves_no_traceback(serve_limited: Serve, server_logs: Records) -> None:
    server = serve_limited(short())
    for _ in range(5):
        sock = tls_connect(server)
        sock.sendall(partial_body_request(4000, 100))
        sock.close()
    # The server is unharmed and answers the next request.
    with server.client() as client:
        response = client.post("/validate", content=orjson.dumps(admission_review(GPU_POD)))
        assert response.status_code == 200
    finished(server)
    no_tracebacks(server_logs)


def test_limits_come_from_the_config(tmp_path: Path) -> None:
    from webhook.config import parse_config
    from webhook.server.listener import connection_limits

    config = parse_config("server: {idleTimeoutSeconds: 7, maxConnections: 12, headerTimeoutSeconds: 2}")
    limits = connection_limits(config)
    assert (limits.idle_timeout, limits.max_connections, limits.header_timeout) == (7, 12, 2)
    defaults = connection_limits(parse_config("{}"))
    assert defaults.max_connections == 1000 and defaults.handshake_timeout == 5
