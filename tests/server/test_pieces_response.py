"""A large answer sent a piece at a time (webhook/server/pieces.py), over the server's real HTTPS stack: the client
gets the parts' bytes whole, with their Content-Length, and the server hands the transport only what the client's
reading lets through, not the whole answer at once."""

from __future__ import annotations

import socket
import ssl
import time
from collections.abc import Iterator

import pytest
from fastapi import FastAPI
from server_support import RunningServer, start_server
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from certs.files import CertificatePaths
from certs.reloader import ReloadingSSLContext
from webhook.server.pieces import PIECE_BYTES, PiecesResponse, pieces

HEAD = bytes(range(256)) * 1000  # 256,000 bytes
TAIL = bytes(reversed(range(256))) * (32 * PIECE_BYTES // 256)  # 32 pieces
PARTS = (HEAD, b",", memoryview(TAIL)[1:])
WHOLE = HEAD + b"," + TAIL[1:]


class CountingSends:
    """ASGI middleware: counts each body message the app hands to the server, in `sent`."""

    def __init__(self, app: ASGIApp, sent: list[int]) -> None:
        self.app = app
        self.sent = sent

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def counted(message: Message) -> None:
            if message["type"] == "http.response.body":
                self.sent[0] += 1
            await send(message)

        await self.app(scope, receive, counted)


@pytest.fixture
def served(cert_paths: CertificatePaths) -> Iterator[tuple[RunningServer, list[int]]]:
    sent = [0]

    def make_app() -> FastAPI:
        async def large(_request: Request) -> Response:
            return PiecesResponse(PARTS, media_type="application/octet-stream")

        app = FastAPI()
        app.router.routes.append(Route("/large", large, methods=["GET"]))  # as api_routes.py: HEAD answered too
        app.add_middleware(CountingSends, sent=sent)
        return app

    tls = ReloadingSSLContext(cert_paths.tls_cert, cert_paths.tls_key)
    for server in start_server(make_app, cert_paths, tls):
        yield server, sent


def test_pieces_cut_every_part_in_order() -> None:
    cut = list(pieces(PARTS))
    assert b"".join(cut) == WHOLE
    assert max(len(piece) for piece in cut) == PIECE_BYTES
    assert all(isinstance(piece, bytes) for piece in cut)
    assert list(pieces((b"", b"ab"), size=1)) == [b"a", b"b"]
    assert list(pieces((b"a", b"bc", memoryview(b"def")), size=4)) == [b"abcd", b"ef"]  # small parts go together


def test_the_client_gets_the_whole_answer_with_its_length(served: tuple[RunningServer, list[int]]) -> None:
    server, _sent = served
    with server.client() as client:
        for _ in range(2):  # and again on the kept-alive connection
            answer = client.get("/large")
            assert answer.status_code == 200
            assert answer.headers["content-length"] == str(len(WHOLE))
            assert answer.content == WHOLE
        head = client.head("/large")
        assert head.status_code == 200 and head.headers["content-length"] == str(len(WHOLE)) and not head.content


def test_the_server_sends_as_the_client_reads(served: tuple[RunningServer, list[int]]) -> None:
    server, sent = served
    context = ssl.create_default_context(cafile=str(server.ca_file))
    raw = socket.create_connection(("127.0.0.1", int(server.url.rsplit(":", 1)[1])), timeout=30)
    with context.wrap_socket(raw, server_hostname="127.0.0.1") as client:
        client.sendall(b"GET /large HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n")
        time.sleep(1.0)  # the client reads nothing: what the server sent waits in the sockets' buffers
        handed = sent[0]
        assert 0 < handed < len(list(pieces(PARTS)))
        data = b""
        while b"\r\n\r\n" not in data:
            data += client.recv(1 << 16)
        body = bytearray(data.partition(b"\r\n\r\n")[2])
        while len(body) < len(WHOLE):
            body += client.recv(1 << 20)
        assert body == WHOLE
