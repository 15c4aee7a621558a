"""The HTTPS listener's own rules: connection cap, timeouts for every phase, and the peer certificate.

uvicorn bounds only the pause between two requests on a connection (`timeout_keep_alive`). Left
alone it keeps a TLS connection that never sends a request, or sends its headers or body one byte
at a time, open forever, and it accepts every connection offered. `LimitedHttpToolsProtocol` adds:

- a cap on open connections per worker: a connection beyond it is closed as soon as it is accepted;
- an idle timeout from the moment a connection is accepted until its first request begins, and between
  requests (in place of uvicorn's keep-alive timer, of the same length);
- a header timeout (first byte of a request to the end of its headers) and a body timeout (end of
  the headers to the end of the body); the connection is closed when one passes;
- the ASGI `tls` extension (scope["extensions"]["tls"]), which uvicorn does not provide, carrying
  the client certificate the handshake verified, so the app can tell the API server from others;
- one write per response: uvicorn writes a response's head and its body in two `transport.write`
  calls, which over TLS are two records, two encryptions and two `send` system calls for an
  AdmissionReview answer of a few hundred bytes. `CoalescingTransport` holds the head back until the
  body's first write and sends them as one.

`BoundedServer` runs uvicorn on an event loop whose TLS servers abort a handshake that takes longer
than the configured time (asyncio's default is 60 s). Each closed connection is counted in
kgwe_connections_closed_total; nothing here logs above debug for a client's own misbehaviour.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from asyncio import TimerHandle
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

import uvicorn
from prometheus_client import Counter, Gauge
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

log = logging.getLogger(__name__)

CONNECTIONS_CLOSED = Counter(
    "kgwe_connections_closed_total",
    "Connections the server closed on its own, by reason: over_limit, idle, header_timeout, body_timeout.",
    ["reason"],
)
OPEN_CONNECTIONS = Gauge("kgwe_open_connections", "Open HTTPS connections (after the TLS handshake).")


class CoalescingTransport:
    """The connection's transport, writing a response's head together with the first part of its body.

    A head is what uvicorn writes for `http.response.start`: a status line other than `100 Continue`
    (which must go out at once: the client waits for it before sending the body) up to the blank line,
    in one write. It is held until the next write, or written by `flush` (the protocol calls it when a
    response is complete: a HEAD answer has no body write) or `close`; everything else passes through.
    """

    __slots__ = ("_held", "_transport")

    def __init__(self, transport: asyncio.Transport) -> None:
        self._transport = transport
        self._held: bytes | None = None

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self._held is not None:
            data, self._held = self._held + bytes(data), None
        elif _is_response_head(data):
            self._held = bytes(data)
            return
        self._transport.write(data)

    def flush(self) -> None:
        if self._held is not None:
            held, self._held = self._held, None
            self._transport.write(held)

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def is_closing(self) -> bool:  # asked at every response: not through __getattr__
        return self._transport.is_closing()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


def _is_response_head(data: bytes | bytearray | memoryview) -> bool:
    return (
        isinstance(data, bytes)
        and data.startswith(b"HTTP/1.1 ")
        and data.endswith(b"\r\n\r\n")
        and not data.startswith(b"HTTP/1.1 100 ")
    )


@dataclass(frozen=True)
class ConnectionLimits:
    """How long each phase of a connection may take and how many may be open (config section `server`)."""

    idle_timeout: float = 30.0
    handshake_timeout: float = 5.0
    header_timeout: float = 5.0
    body_timeout: float = 10.0
    max_connections: int = 1000

    @property
    def shortest(self) -> float:
        """The longest a connection's phase timer waits before it looks again (`_check_deadline`)."""
        return max(0.001, min(self.idle_timeout, self.header_timeout, self.body_timeout))


def tls_extension(transport: asyncio.BaseTransport) -> dict[str, Any] | None:
    """The ASGI TLS extension for a connection, or None on plain TCP.

    `client_cert_chain` holds the client's leaf certificate (PEM) when it presented one; the
    handshake has then already verified it against the client CA (a certificate that fails
    verification fails the handshake). Python exposes only the leaf, so the chain has one entry.
    """
    ssl_object = transport.get_extra_info("ssl_object")
    if not isinstance(ssl_object, ssl.SSLObject | ssl.SSLSocket):
        return None
    der = ssl_object.getpeercert(binary_form=True)
    cipher = ssl_object.cipher()
    return {
        "server_cert": None,
        "client_cert_chain": [ssl.DER_cert_to_PEM_cert(der)] if der else [],
        "client_cert_name": None,
        "client_cert_error": None,
        "tls_version": None,
        "cipher_suite": None,
        "kgwe_tls_version_name": ssl_object.version(),
        "kgwe_cipher_name": cipher[0] if cipher else None,
    }


class LimitedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with the limits above; `limits` is set on a subclass per server
    (webhook/server/admission_protocol.py `admission_protocol()`)."""

    limits: ConnectionLimits = ConnectionLimits()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._phase_timer: TimerHandle | None = None
        self._deadline: float | None = None
        self._deadline_reason = ""
        self._tls: dict[str, Any] | None = None
        self._counted = False

    # -- connection --------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        if len(self.server_state.connections) >= self.limits.max_connections:
            # Not registered with the server: uvicorn's bookkeeping never sees this connection.
            self.transport = transport
            CONNECTIONS_CLOSED.labels("over_limit").inc()
            log.debug("connection refused: %d connections open (server.maxConnections)",
                      len(self.server_state.connections))
            transport.abort()
            return
        super().connection_made(CoalescingTransport(transport))  # type: ignore[arg-type]
        self._counted = True
        OPEN_CONNECTIONS.inc()
        self._tls = tls_extension(transport)
        # Until the first request begins: the same allowance as between two requests.
        self._arm("idle", self.limits.idle_timeout)

    def connection_lost(self, exc: Exception | None) -> None:
        if not self._counted:
            return
        self._counted = False
        OPEN_CONNECTIONS.dec()
        self._disarm()
        if self._phase_timer is not None:
            self._phase_timer.cancel()
            self._phase_timer = None
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if not self._counted:
            return
        super().data_received(data)

    # -- request phases ----------------------------------------------------------------------
    def on_message_begin(self) -> None:
        super().on_message_begin()
        if self._tls is not None:
            # The ASGI TLS extension; uvicorn's scope type does not declare it.
            self.scope["extensions"] = {"tls": self._tls}  # type: ignore[dict-item]
        self._arm("header_timeout", self.limits.header_timeout)

    def on_headers_complete(self) -> None:
        self._arm("body_timeout", self.limits.body_timeout)
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        # The request is in; the app's own deadline bounds the answer.
        self._disarm()
        super().on_message_complete()

    # -- timers ------------------------------------------------------------------------------
    # One timer per connection serves every phase. A phase only sets its deadline; the timer, when it fires,
    # closes the connection if the deadline has passed and otherwise waits again for what is left. It never
    # waits longer than the shortest phase, so a phase armed later cannot end before it fires. A request so
    # costs three float stores instead of three timers made and cancelled (uvloop's `call_later` and
    # `cancel`), and a busy connection makes one timer per shortest phase.
    def _arm(self, reason: str, seconds: float) -> None:
        self._deadline = self.loop.time() + seconds
        self._deadline_reason = reason
        if self._phase_timer is None:
            self._phase_timer = self.loop.call_later(min(seconds, self.limits.shortest), self._check_deadline)

    def _disarm(self) -> None:
        self._deadline = None

    def _check_deadline(self) -> None:
        self._phase_timer = None
        deadline = self._deadline
        if deadline is None:
            return
        left = deadline - self.loop.time()
        if left > 0:
            self._phase_timer = self.loop.call_later(min(left, self.limits.shortest), self._check_deadline)
            return
        self._deadline = None
        self._expire(self._deadline_reason)

    def _expire(self, reason: str) -> None:
        if self.transport.is_closing():
            return
        CONNECTIONS_CLOSED.labels(reason).inc()
        log.debug("connection from %s closed: %s", self.client, reason.replace("_", " "))
        self.transport.close()

    def on_response_complete(self) -> None:
        """uvicorn's own, but for the wait until the next request: the idle phase's deadline, not a timer of its
        own made for every response."""
        transport = self.transport
        if isinstance(transport, CoalescingTransport):
            transport.flush()  # a response without a body write (HEAD) leaves its head held
        self.server_state.total_requests += 1
        if transport.is_closing():
            return
        self.flow.resume_reading()
        if self.pipeline:
            cycle, app = self.pipeline.pop()
            self._start_asgi_task(cycle, app)
        else:
            self._arm("idle", self.limits.idle_timeout)


def _bounded_loop_class(base: type[asyncio.AbstractEventLoop], handshake_timeout: float) -> type[Any]:
    """`base` with every TLS server it creates aborting handshakes after `handshake_timeout` seconds."""

    class BoundedHandshakeLoop(base):  # type: ignore[valid-type,misc]
        async def create_server(self, *args: Any, **kwargs: Any) -> Any:
            if kwargs.get("ssl") is not None:
                kwargs.setdefault("ssl_handshake_timeout", handshake_timeout)
            return await super().create_server(*args, **kwargs)

    return BoundedHandshakeLoop


def event_loop_factory(handshake_timeout: float) -> Callable[[], asyncio.AbstractEventLoop]:
    """uvloop's loop where installed (as uvicorn's `loop="auto"` picks), else asyncio's, with the handshake bound."""
    base: type[asyncio.AbstractEventLoop]
    try:
        import uvloop

        base = uvloop.Loop
    except ImportError:
        base = asyncio.SelectorEventLoop
    loop_class = _bounded_loop_class(base, handshake_timeout)
    return loop_class  # type: ignore[no-any-return]


class BoundedServer(uvicorn.Server):
    """uvicorn.Server on `event_loop_factory(handshake_timeout)`."""

    def __init__(self, config: uvicorn.Config, handshake_timeout: float) -> None:
        super().__init__(config)
        self.handshake_timeout = handshake_timeout

    def run(self, sockets: list[Any] | None = None) -> None:
        serving: Coroutine[Any, Any, None] = self.serve(sockets=sockets)
        with asyncio.Runner(loop_factory=event_loop_factory(self.handshake_timeout)) as runner:
            runner.run(serving)
