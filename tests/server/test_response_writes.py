"""A response leaves the server in one write: head and body in one TLS record (webhook/server/transport.py).

OpenSSL hands a reader at most one record per read, so a client's first read holding the whole response
shows that the head was not written on its own. `Expect: 100-continue` must still get its interim
answer at once, before the client sends the body.
"""

from __future__ import annotations

import ssl
from collections.abc import Iterator

import orjson
import pytest
from server_support import GPU_POD, FakeRuntime, RunningServer, admission_review, start_server

from certs.files import CertificatePaths
from certs.reloader import ReloadingSSLContext
from webhook.server.app import create_app

PATIENCE = 15.0


@pytest.fixture
def served(cert_paths: CertificatePaths) -> Iterator[RunningServer]:
    runtime = FakeRuntime()
    tls = ReloadingSSLContext(cert_paths.tls_cert, cert_paths.tls_key)
    yield from start_server(lambda: create_app(runtime, ui=False, certificate=tls, background=[tls]), cert_paths, tls)


def _connect(server: RunningServer) -> ssl.SSLSocket:
    return server.tls_socket(PATIENCE)


def _request(body: bytes, *, expect_continue: bool = False) -> bytes:
    head = (b"POST /validate HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n"
            b"content-length: %d\r\n" % len(body))
    if expect_continue:
        head += b"expect: 100-continue\r\n"
    return head + b"\r\n"


def _split(response: bytes) -> tuple[bytes, bytes]:
    head, _, body = response.partition(b"\r\n\r\n")
    return head, body


def test_the_whole_answer_comes_in_one_record(served: RunningServer) -> None:
    body = orjson.dumps(admission_review(GPU_POD))
    with _connect(served) as client:
        for _ in range(3):  # also on a kept-alive connection
            client.sendall(_request(body) + body)
            first = client.recv(1 << 20)
            head, answer = _split(first)
            assert head.startswith(b"HTTP/1.1 200")
            length = int(next(line.split(b":", 1)[1] for line in head.split(b"\r\n")
                              if line.lower().startswith(b"content-length:")))
            assert len(answer) == length  # head and body in the first record read
            assert orjson.loads(answer)["kind"] == "AdmissionReview"


def test_100_continue_is_answered_before_the_body_is_sent(served: RunningServer) -> None:
    body = orjson.dumps(admission_review(GPU_POD))
    with _connect(served) as client:
        client.sendall(_request(body, expect_continue=True))
        interim = client.recv(1 << 16)
        assert interim.startswith(b"HTTP/1.1 100 Continue")
        client.sendall(body)
        head, answer = _split(client.recv(1 << 20))
        assert head.startswith(b"HTTP/1.1 200")
        assert orjson.loads(answer)["response"]["uid"]


def test_a_head_request_gets_its_head_without_a_body_write(served: RunningServer) -> None:
    """uvicorn writes nothing after the head of a HEAD answer: the held head goes out when the response
    completes, and the connection serves the next request."""
    with _connect(served) as client:
        client.sendall(b"HEAD /healthz HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n")
        head = client.recv(1 << 16)
        assert head.startswith(b"HTTP/1.1 ") and head.endswith(b"\r\n\r\n")
        client.sendall(b"GET /healthz HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n")
        assert client.recv(1 << 16).startswith(b"HTTP/1.1 200")


def _read_answer(client: ssl.SSLSocket, buffered: bytes = b"") -> tuple[bytes, bytes, bytes]:
    """(head, body, what came after it) of the next answer on `client`."""
    data = buffered
    while b"\r\n\r\n" not in data:
        data += client.recv(1 << 16)
    head, _, rest = data.partition(b"\r\n\r\n")
    length = int(next(line.split(b":", 1)[1] for line in head.split(b"\r\n")
                      if line.lower().startswith(b"content-length:")))
    while len(rest) < length:
        rest += client.recv(1 << 16)
    return head, rest[:length], rest[length:]


def test_pipelined_admission_requests_are_answered_in_order(served: RunningServer) -> None:
    """Admission requests sent back to back on one connection get their answers in order, each with its own
    uid, and the connection stays open."""
    reviews = [admission_review(GPU_POD) for _ in range(3)]
    for number, review in enumerate(reviews):
        review["request"]["uid"] = f"pipelined-{number}"
    with _connect(served) as client:
        client.sendall(b"".join(_request(orjson.dumps(r)) + orjson.dumps(r) for r in reviews))
        rest = b""
        for number in range(3):
            head, answer, rest = _read_answer(client, rest)
            assert head.startswith(b"HTTP/1.1 200") and b"content-type: application/json" in head
            assert orjson.loads(answer)["response"]["uid"] == f"pipelined-{number}"
        client.sendall(b"GET /healthz HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n")
        assert _read_answer(client)[0].startswith(b"HTTP/1.1 200")


def test_http_1_0_admission_request_is_answered_and_closed(served: RunningServer) -> None:
    body = orjson.dumps(admission_review(GPU_POD))
    with _connect(served) as client:
        client.sendall(_request(body).replace(b"HTTP/1.1", b"HTTP/1.0") + body)
        head, answer, _rest = _read_answer(client)
        assert head.startswith(b"HTTP/1.1 200") and b"connection: close" in head.lower()
        assert orjson.loads(answer)["kind"] == "AdmissionReview"
        assert client.recv(1 << 16) == b""  # closed by the server


def test_admission_path_with_a_query_and_another_method(served: RunningServer) -> None:
    """The deadline's `?timeout=` reaches the endpoint; a GET to the path is uvicorn's and FastAPI's (405)."""
    body = orjson.dumps(admission_review(GPU_POD))
    with _connect(served) as client:
        client.sendall(_request(body).replace(b"POST /validate", b"POST /validate?timeout=10s") + body)
        head, answer, _rest = _read_answer(client)
        assert head.startswith(b"HTTP/1.1 200") and orjson.loads(answer)["response"]["uid"]
        client.sendall(b"GET /validate HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n")
        assert _read_answer(client)[0].startswith(b"HTTP/1.1 405")
