"""The server's side of the background tasks (policies/kernel/background.py): the one body that must run on the
serving event loop, and the handle through which a task's thread reaches that loop.

Every background task of `kgwe serve` runs on its own thread, except one step: swapping the serving
certificate into the live SSLContext. `SSLContext.load_cert_chain` and the handshakes' `SSL_new` both
release the GIL, and OpenSSL does not allow an SSL_CTX to be changed while another thread creates a
connection from it; on the event loop's thread the two never overlap. So the `certificate-reload` task
keeps its schedule, state and metrics on its thread and hands only the reload itself to the loop.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Callable
from typing import Protocol, TypeVar

from policies.kernel.background import Task

T = TypeVar("T")

# A reload reads two small files and loads them twice: far below this, unless the loop is wedged.
ON_LOOP_TIMEOUT_SECONDS = 30.0


class ReloadableCertificate(Protocol):
    """A serving certificate polled for renewal (certs/reloader.py's ReloadingSSLContext)."""

    @property
    def poll_seconds(self) -> float: ...

    def reload_if_changed(self) -> bool: ...


class ServingLoop:
    """The event loop that serves, while it runs (bound and unbound by the app's lifespan)."""

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop

    def unbind(self) -> None:
        self._loop = None

    def call(self, function: Callable[[], T], timeout: float = ON_LOOP_TIMEOUT_SECONDS) -> T:
        """Run `function` on the serving loop and return its result (or raise its exception) on this thread.

        RuntimeError when no loop is bound (the server has not started, or has stopped); TimeoutError when
        the loop did not get to it within `timeout` seconds (it is then not run at all).
        """
        loop = self._loop
        if loop is None:
            raise RuntimeError("the serving event loop is not running")
        future: concurrent.futures.Future[T] = concurrent.futures.Future()

        def run() -> None:
            if not future.set_running_or_notify_cancel():
                return  # the caller gave up waiting
            try:
                future.set_result(function())
            except BaseException as exc:  # handed to the waiting thread, which decides what it means
                future.set_exception(exc)

        loop.call_soon_threadsafe(run)
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise TimeoutError(f"the serving event loop did not run the call within {timeout:.0f}s") from None


def certificate_task(certificate: ReloadableCertificate, loop: ServingLoop) -> Task:
    """The `certificate-reload` task: every `poll_seconds`, `reload_if_changed()` on the serving loop.

    A refused pair is the reloader's business (logged once, counted, the current pair keeps serving); a
    failure here is the loop not answering, logged by the task and retried at the next poll.
    """
    return Task("certificate-reload", lambda: loop.call(certificate.reload_if_changed),
                interval=certificate.poll_seconds)
