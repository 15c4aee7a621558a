"""The floor under the HTTP layer: a bare uvloop TLS server that parses each request with httptools (as uvicorn
does) and answers every one with the same 300-byte AdmissionReview, no ASGI, no app. `bench/instructions.py bare`
counts its instructions a request against `serve`'s (docs/performance.md, "The nineteenth round").

    python bench/bare_server.py CERT_DIR PORT_FILE
"""

from __future__ import annotations

import asyncio
import ssl
import sys
from pathlib import Path
from typing import cast

import httptools
import uvloop

ANSWER = (b'{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{"uid":"x","allowed":true'
          + b" " * 200 + b"}}")
RESPONSE = b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\ncontent-type: application/json\r\n\r\n%s" % (len(ANSWER), ANSWER)


class _Canned(asyncio.Protocol):
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's TLS transport is not asyncio's class
        self.parser = httptools.HttpRequestParser(self)

    def data_received(self, data: bytes) -> None:
        self.parser.feed_data(data)

    def on_message_complete(self) -> None:
        self.transport.write(RESPONSE)


async def _serve(cert_dir: Path, port_file: Path) -> None:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert_dir / "tls.crt", cert_dir / "tls.key")
    server = await asyncio.get_running_loop().create_server(_Canned, "127.0.0.1", 0, ssl=context)
    port_file.write_text(str(server.sockets[0].getsockname()[1]))
    await asyncio.Event().wait()


if __name__ == "__main__":
    uvloop.run(_serve(Path(sys.argv[1]), Path(sys.argv[2])))
