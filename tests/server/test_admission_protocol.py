"""Admission POSTs answered by the connection's protocol (webhook/server/admission_protocol.py) give what
uvicorn's ASGI path gives, keep HTTP/1.1's order and connection rules, and leave every other request to uvicorn.

A body sent with `transfer-encoding: chunked` has no declared length, so it takes uvicorn's path: the same review
sent both ways must get the same status, headers and body.
"""

from __future__ import annotations

import ssl
from collections.abc import Iterator
from typing import Any

import orjson
import pytest
from server_support import GPU_POD, FakeRuntime, RunningServer, admission_review, start_server

from certs.files import CertificatePaths
from certs.reloader import ReloadingSSLContext
from webhook.config import Config
from webhook.server.app import create_app

PATIENCE = 15.0


@pytest.fixture
def served(cert_paths: CertificatePaths) -> Iterator[RunningServer]:
    runtime = FakeRuntime()
    runtime.set_config(Config.model_validate({"limits": {"maxRequestBytes": 20_000}}))
    tls = ReloadingSSLContext(cert_paths.tls_cert, cert_paths.tls_key)
    yield from start_server(lambda: create_app(runtime, ui=False, certificate=tls, background=[tls]), cert_paths, tls)


def _connect(server: RunningServer) -> ssl.SSLSocket:
    return server.tls_socket(PATIENCE)


def _post(path: str, body: bytes, *, chunked: bool = False, version: bytes = b"1.1", extra: bytes = b"") -> bytes:
    head = b"POST %s HTTP/%s\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n" % (path.encode(), version)
    if chunked:
        return head + extra + b"transfer-encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)
    return head + extra + b"content-length: %d\r\n\r\n" % len(body) + body


class _Reader:
    """HTTP/1.1 responses read off one connection, each whole (its content-length)."""

    def __init__(self, sock: ssl.SSLSocket) -> None:
        self.sock = sock
        self.buffer = b""

    def _fill(self) -> bool:
        chunk = self.sock.recv(1 << 16)
        self.buffer += chunk
        return bool(chunk)

    def response(self) -> tuple[bytes, dict[bytes, bytes], bytes]:
        while b"\r\n\r\n" not in self.buffer:
            assert self._fill(), "the connection closed before a whole response head"
        head, _, self.buffer = self.buffer.partition(b"\r\n\r\n")
        status, *lines = head.split(b"\r\n")
        headers = {name.lower(): value.strip() for name, _, value in (line.partition(b":") for line in lines)}
        length = int(headers[b"content-length"])
        while len(self.buffer) < length:
            assert self._fill(), "the connection closed before a whole response body"
        body, self.buffer = self.buffer[:length], self.buffer[length:]
        return status, headers, body

    def closed(self) -> bool:
        return not self.buffer and not self._fill()


def _exchange(server: RunningServer, request: bytes) -> tuple[bytes, dict[bytes, bytes], bytes]:
    with _connect(server) as sock:
        sock.sendall(request)
        return _Reader(sock).response()


def _pod(name: str) -> dict[str, Any]:
    pod = orjson.loads(orjson.dumps(GPU_POD))
    pod["metadata"]["name"] = name
    return pod


BODIES = {
    "allowed": orjson.dumps(admission_review(GPU_POD)),
    "refused by the core": orjson.dumps(admission_review(_pod("forbidden"))),
    "the core fails": orjson.dumps(admission_review(_pod("explode"))),
    "not JSON": b"{not json",
    "not a review": orjson.dumps({"kind": "Pod"}),
}


@pytest.mark.parametrize("path", ["/validate", "/mutate", "/validate?timeout=10s"])
@pytest.mark.parametrize("case", sorted(BODIES))
def test_a_declared_length_and_a_chunked_body_get_the_same_answer(served: RunningServer, path: str,
                                                                  case: str) -> None:
    body = BODIES[case]
    fast = _exchange(served, _post(path, body))
    asgi = _exchange(served, _post(path, body, chunked=True))
    assert fast[0] == asgi[0]
    assert fast[2] == asgi[2]
    assert fast[1].keys() == asgi[1].keys()
    assert {k: v for k, v in fast[1].items() if k != b"date"} == {k: v for k, v in asgi[1].items() if k != b"date"}
    assert fast[0].startswith(b"HTTP/1.1 200" if case != "not JSON" and case != "not a review" else b"HTTP/1.1 400")


def test_kept_alive_connection_answers_each_request(served: RunningServer) -> None:
    with _connect(served) as sock:
        reader = _Reader(sock)
        for index in range(5):
            review = admission_review(GPU_POD)
            review["request"]["uid"] = f"uid-{index}"
            sock.sendall(_post("/validate" if index % 2 else "/mutate", orjson.dumps(review)))
            status, _headers, body = reader.response()
            assert status.startswith(b"HTTP/1.1 200")
            assert orjson.loads(body)["response"]["uid"] == f"uid-{index}"


def test_pipelined_requests_are_answered_in_their_order(served: RunningServer) -> None:
    """Sent in one write: admission POSTs (the protocol's path, and uvicorn's queue behind one in flight) and
    a GET (uvicorn's path) between them; the answers come back in the order asked."""
    requests = []
    for index in range(4):
        review = admission_review(GPU_POD)
        review["request"]["uid"] = f"uid-{index}"
        requests.append(_post("/validate", orjson.dumps(review)))
    requests.insert(2, b"GET /healthz HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n")
    with _connect(served) as sock:
        sock.sendall(b"".join(requests))
        reader = _Reader(sock)
        uids = []
        for _ in requests:
            status, headers, body = reader.response()
            assert status.startswith(b"HTTP/1.1 200")
            answer = orjson.loads(body)
            uids.append(answer["response"]["uid"] if headers[b"content-type"] == b"application/json"
                        and "response" in answer else "health")
    assert uids == ["uid-0", "uid-1", "health", "uid-2", "uid-3"]


def test_connection_close_is_honoured(served: RunningServer) -> None:
    with _connect(served) as sock:
        sock.sendall(_post("/validate", BODIES["allowed"], extra=b"connection: close\r\n"))
        reader = _Reader(sock)
        status, headers, _body = reader.response()
        assert status.startswith(b"HTTP/1.1 200")
        assert headers[b"connection"] == b"close"
        assert reader.closed()


def test_http_1_0_is_answered_and_closed(served: RunningServer) -> None:
    with _connect(served) as sock:
        sock.sendall(_post("/validate", BODIES["allowed"], version=b"1.0"))
        reader = _Reader(sock)
        status, _headers, body = reader.response()
        assert status.startswith(b"HTTP/1.1 200")
        assert orjson.loads(body)["response"]["allowed"] is True
        assert reader.closed()


def test_a_body_over_the_limit_is_refused_before_it_is_read(served: RunningServer) -> None:
    declared = b"POST /validate HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-length: 30000\r\n\r\n"
    status, _headers, body = _exchange(served, declared)  # no body sent: the answer does not wait for it
    assert status.startswith(b"HTTP/1.1 413")
    assert orjson.loads(body)["reason"] == "RequestEntityTooLarge"


def test_other_methods_and_paths_are_uvicorns(served: RunningServer) -> None:
    assert _exchange(served, b"GET /validate HTTP/1.1\r\nhost: x\r\n\r\n")[0].startswith(b"HTTP/1.1 405")
    status, _headers, body = _exchange(served, _post("/validate/", BODIES["allowed"]))
    assert not status.startswith(b"HTTP/1.1 200")
    assert b"AdmissionReview" not in body


class _ConfigWithoutMode:
    """A configuration whose `mode` cannot be read: the endpoint fails after its decision, outside what it answers
    itself, which is a bug in it; the connection gets a 500 and is closed, as uvicorn's path does."""

    def __init__(self, config: Config) -> None:
        self._config = config

    def __getattr__(self, name: str) -> Any:
        if name == "mode":
            raise RuntimeError("no mode")
        return getattr(self._config, name)


def test_a_failing_endpoint_gets_a_500_and_the_connection_closed(cert_paths: CertificatePaths) -> None:
    runtime = FakeRuntime()
    tls = ReloadingSSLContext(cert_paths.tls_cert, cert_paths.tls_key)
    running = start_server(lambda: create_app(runtime, ui=False, certificate=tls, background=[tls]), cert_paths, tls)
    server = next(running)
    try:
        runtime.config = _ConfigWithoutMode(runtime.config)  # type: ignore[assignment]
        for chunked in (False, True):
            with _connect(server) as sock:
                sock.sendall(_post("/validate", BODIES["allowed"], chunked=chunked))
                reader = _Reader(sock)
                status, headers, body = reader.response()
                assert status.startswith(b"HTTP/1.1 500")
                assert headers[b"connection"] == b"close"
                assert body == b"Internal Server Error"
                assert reader.closed()
        assert _exchange(server, b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n")[0].startswith(b"HTTP/1.1 200")
    finally:
        running.close()
