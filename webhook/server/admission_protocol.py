"""Admission POSTs answered by the connection's own protocol, without uvicorn's ASGI cycle.

An AdmissionReview is one POST of a few kilobytes with a declared length, answered with one small JSON
body. Through uvicorn's ASGI cycle each costs a `RequestResponseCycle`, an `asyncio.Event`, the `receive`
and `send` messages and the response headers checked one by one: measured end to end (callgrind,
`bench/instructions.py serve`), the HTTP layer took 192k instructions of a 615k `/validate` request where a
bare uvloop TLS server with the same parser takes 43k (docs/performance.md, "The nineteenth round").

`AdmissionHttpProtocol` takes a request this path when, at the end of its headers, it is an HTTP/1.1 POST
to an admission endpoint's exact path with a `content-length` within `limits.maxRequestBytes`, no
`transfer-encoding`, no `expect`, no upgrade, and nothing else in flight on the connection. It keeps the
body, and once the body is whole it runs the endpoint (`AdmissionEndpoint.answer_read`) in a task of the
server (so that a graceful shutdown waits for it) and writes the status line, uvicorn's default headers, the
body's length and type, and the body in one write. Everything else (every other route, a pipelined request
behind one in flight, a body too large or of unknown length) takes uvicorn's path unchanged, and what the
caller sees is the same answer either way: the same status, body and headers but for their order.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, Protocol

from uvicorn.protocols.http.httptools_impl import STATUS_LINE

from webhook.server.admission_endpoint import answer_headers
from webhook.server.callers import CallerCheck
from webhook.server.transport import ConnectionLimits, LimitedHttpToolsProtocol

log = logging.getLogger(__name__)

_INTERNAL_ERROR = (b"HTTP/1.1 500 Internal Server Error\r\ncontent-type: text/plain; charset=utf-8\r\n"
                   b"content-length: 21\r\nconnection: close\r\n\r\nInternal Server Error")


class ReadBodyEndpoint(Protocol):
    """What this path needs of an admission endpoint (webhook/server/admission_endpoint.py)."""

    @property
    def max_request_bytes(self) -> int: ...

    def caller(self, scope: Mapping[str, Any]) -> CallerCheck: ...

    async def answer_read(self, scope: Mapping[str, Any], body: bytes, caller: CallerCheck) -> tuple[int, bytes]: ...


class _NoEvent:
    """uvicorn's protocol sets its cycle's `message_event` when the connection is lost; nothing waits on it."""

    __slots__ = ()

    def set(self) -> None:
        return None


_NO_EVENT = _NoEvent()


class AdmissionCall:
    """The one admission request in flight on a connection, standing where uvicorn keeps its cycle: uvicorn's
    own code reads `response_complete`, sets `disconnected` when the connection is lost and `keep_alive` when
    the server shuts down, and sets `message_event`."""

    __slots__ = ("body", "caller", "disconnected", "endpoint", "keep_alive", "response_complete")

    message_event = _NO_EVENT

    def __init__(self, endpoint: ReadBodyEndpoint, caller: CallerCheck, keep_alive: bool) -> None:
        self.endpoint = endpoint
        self.caller = caller
        self.keep_alive = keep_alive
        self.body: list[bytes] = []
        self.disconnected = False
        self.response_complete = False


def response_bytes(status: int, body: bytes, default_headers: list[tuple[bytes, bytes]], keep_alive: bool) -> bytes:
    """A whole HTTP/1.1 response: what uvicorn writes for the endpoint's `http.response.start` and `.body`."""
    parts = [STATUS_LINE[status]]
    for name, value in (*default_headers, *answer_headers(body)):
        parts += (name, b": ", value, b"\r\n")
    if not keep_alive:
        parts.append(b"connection: close\r\n")
    parts += (b"\r\n", body)
    return b"".join(parts)


class AdmissionHttpProtocol(LimitedHttpToolsProtocol):
    """`LimitedHttpToolsProtocol` answering admission POSTs itself (module docstring); `endpoints` is set by
    `admission_protocol()`."""

    endpoints: Mapping[str, ReadBodyEndpoint] = {}

    def on_headers_complete(self) -> None:
        endpoint = self._admission_endpoint()
        if endpoint is None:
            super().on_headers_complete()
            return
        self._arm("body_timeout", self.limits.body_timeout)
        caller = endpoint.caller(self.scope)
        self.cycle = AdmissionCall(endpoint, caller, self.parser.should_keep_alive())  # type: ignore[assignment]

    def _admission_endpoint(self) -> ReadBodyEndpoint | None:
        """The endpoint when this request takes the admission path, else None (uvicorn's path)."""
        cycle = self.cycle
        if cycle is not None and not cycle.response_complete:
            return None  # pipelined behind a request in flight: uvicorn queues it in order
        parser = self.parser
        if parser.get_method() != b"POST" or parser.get_http_version() != "1.1" or parser.should_upgrade():
            return None
        if self.expect_100_continue or self.root_path or self.limit_concurrency is not None:
            return None  # uvicorn's path: the interim answer, a mounted app, its 503 over a concurrency limit
        url = self.url
        query = b""
        if b"?" in url:
            url, _mark, query = url.partition(b"?")
        path = url.decode("latin-1")
        endpoint = self.endpoints.get(path)
        if endpoint is None:
            return None
        length: bytes | None = None
        for name, value in self.headers:
            if name == b"content-length":
                if length is not None:
                    return None
                length = value
            elif name == b"transfer-encoding":
                return None
        if length is None or not length.isdigit() or int(length) > endpoint.max_request_bytes:
            return None  # uvicorn's path answers these (411 is not ours to invent; 413 by the endpoint)
        scope = self.scope
        scope["method"] = "POST"
        scope["path"] = path
        scope["raw_path"] = url
        scope["query_string"] = query
        return endpoint

    def on_body(self, body: bytes) -> None:
        cycle = self.cycle
        if isinstance(cycle, AdmissionCall):
            if not cycle.caller.refused:  # a refused caller's body is read and dropped, as uvicorn's path does
                cycle.body.append(body)
        else:
            super().on_body(body)

    def on_message_complete(self) -> None:
        cycle = self.cycle
        if not isinstance(cycle, AdmissionCall):
            super().on_message_complete()
            return
        self._disarm()
        body = cycle.body[0] if len(cycle.body) == 1 else b"".join(cycle.body)
        cycle.body = []
        task = self.loop.create_task(self._answer(cycle, self.scope, body))
        task.add_done_callback(self.tasks.discard)
        self.tasks.add(task)

    async def _answer(self, call: AdmissionCall, scope: Mapping[str, Any], body: bytes) -> None:
        try:
            status, content = await call.endpoint.answer_read(scope, body, call.caller)
        except Exception:
            # The endpoint answers its own errors; this is a bug in it. As uvicorn does: a 500, and the
            # connection closed.
            log.exception("admission endpoint %s failed", scope.get("path"))
            self._abandon(call, _INTERNAL_ERROR)
            return
        except BaseException:  # cancelled (the server stops): the caller gets no half answer
            self._abandon(call, b"")
            raise
        if call.disconnected:
            call.response_complete = True
            return
        self.transport.write(response_bytes(status, content, self.server_state.default_headers, call.keep_alive))
        call.response_complete = True
        if not call.keep_alive:
            self.transport.close()
        self.on_response_complete()

    def _abandon(self, call: AdmissionCall, last_words: bytes) -> None:
        call.response_complete = True
        if not call.disconnected and not self.transport.is_closing():
            if last_words:
                self.transport.write(last_words)
            self.transport.close()


def admission_protocol(limits: ConnectionLimits, endpoints: Mapping[str, ReadBodyEndpoint]
                       ) -> type[AdmissionHttpProtocol]:
    """A protocol class bound to `limits` and answering POSTs to `endpoints`' paths itself."""
    return type("AdmissionHttpProtocol", (AdmissionHttpProtocol,), {"limits": limits, "endpoints": dict(endpoints)})
