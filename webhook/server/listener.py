"""The HTTPS listener of `kgwe serve`: listening sockets bound before anything starts (one per worker with
SO_REUSEPORT), and uvicorn over them with the reloading TLS context and the connection limits of
webhook/server/transport.py. Binding first turns a busy port or a foreign address into one line saying
what to do (`ServeError`), not a traceback from deep inside uvicorn.
"""

from __future__ import annotations

import errno
import socket

import uvicorn
from starlette.types import ASGIApp

from certs.reloader import ReloadingSSLContext
from webhook.config import Config
from webhook.server.admission_protocol import admission_protocol
from webhook.server.transport import BoundedServer, ConnectionLimits


class ServeError(RuntimeError):
    """`kgwe serve` cannot start; the message says why."""


def connection_limits(config: Config) -> ConnectionLimits:
    """The listener's limits from the config's `server` section (read at start)."""
    server = config.server
    return ConnectionLimits(
        idle_timeout=server.idle_timeout_seconds,
        handshake_timeout=server.handshake_timeout_seconds,
        header_timeout=server.header_timeout_seconds,
        body_timeout=server.body_timeout_seconds,
        max_connections=server.max_connections,
    )


def uvicorn_server(
    app: ASGIApp,
    host: str,
    port: int,
    tls: ReloadingSSLContext,
    log_level: str = "info",
    *,
    limits: ConnectionLimits | None = None,
) -> uvicorn.Server:
    """uvicorn serving `app` over TLS with the reloading context, httptools and uvloop, and the connection
    limits of webhook/server/transport.py (defaults: the config's defaults). An app with admission endpoints
    (`KgweApp.admission_endpoints`) has their POSTs answered by the protocol itself
    (webhook/server/admission_protocol.py)."""
    limits = limits or connection_limits(Config())
    endpoints = getattr(app, "admission_endpoints", None) or {}
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        ssl_context_factory=lambda _config, _default: tls.context,
        loop="auto",
        http=admission_protocol(limits, endpoints),
        lifespan="on",
        access_log=False,
        log_level=log_level,
        # uvicorn's keep-alive timer is not armed (transport.py times the wait between requests as the idle
        # phase, to the limit's own precision); its setting says the same, in the whole seconds it takes.
        timeout_keep_alive=max(1, round(limits.idle_timeout)),
        server_header=False,
        # The API server connects directly: a caller's X-Forwarded-* headers must not change the client
        # address the server sees, and the middleware that would read them runs on every request.
        proxy_headers=False,
    )
    return BoundedServer(config, limits.handshake_timeout)


def listen(host: str, port: int, *, reuse_port: bool = False, open_group: bool = False) -> socket.socket:
    """A listening socket, bound before anything else starts, so a busy port or a foreign address is
    one line saying what to do (ServeError), not a traceback from deep inside uvicorn.

    `reuse_port` joins a SO_REUSEPORT group already on the port; `open_group` binds alone first (a port
    someone listens on, in a group or not, is refused) and only then lets this server's other workers join.
    Binding with SO_REUSEPORT from the start would let a second `kgwe serve` join the first one's group,
    the kernel splitting connections between two servers with different state.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        sock = _bound(host, port, family, reuse_port=reuse_port)
        if open_group:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.listen(2048)
    except PermissionError as exc:
        raise ServeError(f"cannot listen on {host}:{port}: {exc.strerror}; ports below 1024 need privileges, "
                         "give --port 8443 or another free port") from exc
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            raise ServeError(f"port {port} on {host} is already in use (another kgwe serve?); stop it or give "
                             "--port N") from exc
        if exc.errno == errno.EADDRNOTAVAIL:
            raise ServeError(f"cannot listen on {host}:{port}: {host} is not an address of this machine; give "
                             "--host 127.0.0.1 or --host 0.0.0.0") from exc
        raise ServeError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from exc
    sock.set_inheritable(True)
    return sock


def _bound(host: str, port: int, family: socket.AddressFamily, *, reuse_port: bool) -> socket.socket:
    """A bound TCP socket, set up as `socket.create_server` sets it (SO_REUSEADDR: a restart need not wait
    for the last connections' TIME_WAIT; IPv6 only on an IPv6 address)."""
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if reuse_port:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        sock.bind((host, port))
    except BaseException:
        sock.close()
        raise
    return sock


def listening_sockets(host: str, port: int, workers: int) -> list[socket.socket]:
    """One listening socket per worker, all on `host:port` with SO_REUSEPORT, where the system has it;
    otherwise one socket the workers share.

    With one shared socket the worker whose event loop wakes first accepts every connection that is
    waiting: 16 keep-alive connections opened together (the API server's, a load test's) all went to one
    of two workers in two runs out of three, and the other worker idled for the connections' lifetime. With
    SO_REUSEPORT the kernel spreads new connections over the sockets by their addresses. The parent keeps
    every socket open, so connections that arrive while a worker restarts wait in its backlog. Only
    processes of the same user can join the group (Linux), so no other user can take a share; and the first
    socket binds before it joins any group, so a second `kgwe serve` on the port is refused, not merged.
    """
    if workers <= 1 or not hasattr(socket, "SO_REUSEPORT"):
        return [listen(host, port)]
    sockets: list[socket.socket] = []
    try:
        for index in range(workers):
            # The first binds alone (a port in use is refused), then opens the group its siblings join.
            sock = listen(host, port, reuse_port=index > 0, open_group=index == 0)
            sockets.append(sock)
            port = sock.getsockname()[1]  # port 0: the others join the port the first one got
    except ServeError:
        for sock in sockets:
            sock.close()
        raise
    return sockets
