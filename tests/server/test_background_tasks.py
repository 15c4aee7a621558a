"""The server's background tasks over real HTTPS: the app's lifespan starts and stops its supervisor, the
certificate reload runs on the serving event loop, and a task whose thread died shows in /readyz."""

from __future__ import annotations

import asyncio
import threading

from server_support import FakeRuntime, start_server
from waiting import eventually

from certs.files import CertificatePaths
from certs.reloader import ReloadingSSLContext
from policies.kernel.background import Task
from policies.kernel.supervisor import Supervisor
from webhook.server.app import create_app


class RecordingCertificate:
    """The real reloading context, noting the thread and event loop each reload ran on."""

    def __init__(self, tls: ReloadingSSLContext) -> None:
        self.tls = tls
        self.poll_seconds = tls.poll_seconds
        self.seen: list[tuple[str, bool]] = []

    def reload_if_changed(self) -> bool:
        try:
            asyncio.get_running_loop()
            on_loop = True
        except RuntimeError:
            on_loop = False
        self.seen.append((threading.current_thread().name, on_loop))
        return self.tls.reload_if_changed()


def test_tasks_run_while_serving_and_stop_at_shutdown(runtime: FakeRuntime, cert_paths: CertificatePaths) -> None:
    tls = ReloadingSSLContext(cert_paths.tls_cert, cert_paths.tls_key, poll_seconds=0.02)
    certificate = RecordingCertificate(tls)
    ticks: list[str] = []
    supervisor = Supervisor([Task("ticker", lambda: ticks.append(threading.current_thread().name), interval=0.01)])
    with_app = lambda: create_app(  # noqa: E731
        runtime, ui=False, certificate=tls, background=[certificate], supervisor=supervisor
    )
    runtime.store.mark_loaded()
    for server in start_server(with_app, cert_paths, tls):
        eventually(lambda: len(ticks) >= 3 and len(certificate.seen) >= 3)
        with server.client() as client:
            assert client.get("/readyz").json() == {"status": "ready"}
        states = {s.name: s for s in supervisor.states()}
        assert states["ticker"].running and states["certificate-reload"].running
        assert states["certificate-reload"].runs >= 3 and states["certificate-reload"].failures == 0
    # Shut down with the server: no task thread is left.
    assert not any(s.running for s in supervisor.states())
    assert set(ticks) == {"kgwe-ticker"}
    # Every reload ran on the serving event loop's thread, none on the task's own thread.
    assert all(on_loop and name != "kgwe-certificate-reload" for name, on_loop in certificate.seen)


def test_readyz_lists_a_task_whose_thread_died(runtime: FakeRuntime, cert_paths: CertificatePaths) -> None:
    def exits() -> None:
        raise SystemExit("a native engine panicked")

    tls = ReloadingSSLContext(cert_paths.tls_cert, cert_paths.tls_key, poll_seconds=0.05)
    supervisor = Supervisor([Task("doomed", exits, interval=0.01, run_at_start=True)])
    with_app = lambda: create_app(  # noqa: E731
        runtime, ui=False, certificate=tls, background=[tls], supervisor=supervisor
    )
    runtime.store.mark_loaded()
    for server in start_server(with_app, cert_paths, tls):
        eventually(lambda: supervisor.states()[0].crashed is not None)
        with server.client() as client:
            response = client.get("/readyz")
        # Degraded, still serving: ready, with the problem shown.
        assert response.status_code == 200
        assert response.json() == {
            "status": "ready", "problems": ["background task doomed stopped: SystemExit: a native engine panicked"],
        }
