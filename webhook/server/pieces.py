"""Large answers sent a piece at a time (issue 36).

At 10,000 GPU nodes a `/metrics` scrape is about 54 MB of text, rendered in parts (metrics_parts.py). Handed to
uvicorn as one body it was joined, joined again to the response's head (transport.py sends a head with the first
body write), and encrypted whole into the TLS transport's buffer before the scraper had read any of it: with a
worker near its memory goal, those copies were its peak (docs/performance.md, "Peak memory at 10,000 nodes"). The
read API's answers are sent whole: in pieces they raised admission's tail on the same server (same section).

A `PiecesResponse` sends its parts in pieces of at most `PIECE_BYTES`, each sent after uvicorn's flow control
says the client has read what was buffered: a piece or two is copied and buffered at a time, never the answer.
The client receives the same bytes with the same Content-Length.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from starlette.responses import Response
from starlette.types import Receive, Scope, Send

# Large enough that a 49 MB answer is 49 sends (each a turn of the event loop), small enough that a piece's copy
# and its encrypted form are noise beside a worker's heap.
PIECE_BYTES = 1 << 20

Part = bytes | memoryview


def pieces(parts: tuple[Part, ...], size: int = PIECE_BYTES) -> Iterator[bytes]:
    """The concatenation of `parts` as bytes of `size` (the last may be shorter): small parts go out together,
    large ones are cut, a memoryview part is copied a piece at a time."""
    held: list[Part] = []
    held_bytes = 0
    for part in parts:
        start = 0
        while start < len(part):
            taken = part[start:start + size - held_bytes]
            held.append(taken)
            held_bytes += len(taken)
            start += len(taken)
            if held_bytes == size:
                yield b"".join(held)
                held, held_bytes = [], 0
    if held:
        yield b"".join(held)


class PiecesResponse(Response):
    """The concatenation of `parts` as the body, sent in pieces (see the module's docstring)."""

    def __init__(self, parts: tuple[Part, ...], status_code: int = 200, headers: Mapping[str, str] | None = None,
                 media_type: str | None = None) -> None:
        self.parts = parts
        length = sum(len(part) for part in parts)
        super().__init__(None, status_code, {**(headers or {}), "content-length": str(length)}, media_type)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
        for piece in pieces(self.parts):
            await send({"type": "http.response.body", "body": piece, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})
        if self.background is not None:
            await self.background()
