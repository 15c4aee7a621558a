"""The serving certificate is renewed twice while clients keep opening connections to the real webhook (real
runtime, policies, uvicorn over TLS on 127.0.0.1): no request fails, and new connections get the new leaf."""

from __future__ import annotations

import http.client
import itertools
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
import uvicorn
import yaml
from cryptography import x509
from fault_support import CLUSTER, CONFIG, ROOT
from patience import WAIT_SECONDS

from certs.authority import Settings, reconcile
from certs.files import CertificatePaths, ensure_files, read_material, write_material
from certs.reloader import ReloadingSSLContext
from webhook.assembly import build_runtime
from webhook.config import load_config
from webhook.review import create_review
from webhook.server.app import create_app
from webhook.server.listener import uvicorn_server

SETTINGS = Settings(service="kgwe-webhook", namespace="kgwe")
CLIENTS = 4


@pytest.fixture
def cert_paths(tmp_path: Path) -> CertificatePaths:
    paths, _ = ensure_files(tmp_path / "certs", SETTINGS)
    return paths


@pytest.fixture
def port(cert_paths: CertificatePaths) -> Iterator[int]:
    """The real webhook served from a thread that builds it (native policy engines stay on their thread)."""
    tls = ReloadingSSLContext(cert_paths.tls_cert, cert_paths.tls_key, poll_seconds=0.05)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    servers: list[uvicorn.Server] = []

    def serve() -> None:
        runtime = build_runtime(load_config(CONFIG), CLUSTER)
        app = create_app(runtime, ui=False, certificate=tls, background=[tls])
        servers.append(uvicorn_server(app, "127.0.0.1", 0, tls, log_level="warning"))
        servers[0].run(sockets=[sock])

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not (servers and servers[0].started):
        assert thread.is_alive() and time.monotonic() < deadline, "the webhook did not start"
        time.sleep(0.02)
    yield sock.getsockname()[1]
    servers[0].should_exit = True
    thread.join(10)
    sock.close()


def bodies() -> list[tuple[str, bytes]]:
    requests = []
    for path in sorted((ROOT / "examples" / "pods").glob("0*.yaml")):
        pod = next(d for d in yaml.safe_load_all(path.read_text()) if d)
        for endpoint in ("/mutate", "/validate"):
            requests.append((f"{endpoint}?timeout=10s", orjson.dumps(create_review(pod, "alice", ["team-a"]))))
    return requests


def peer_serial(connection: http.client.HTTPSConnection) -> int:
    assert connection.sock is not None
    der = connection.sock.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der).serial_number


def renew(paths: CertificatePaths) -> int:
    """A new leaf from the same CA, written the way `kgwe certs` writes it."""
    material = read_material(paths.directory)
    assert material is not None
    renewed, _ = reconcile(material, Settings(service=SETTINGS.service, namespace=SETTINGS.namespace,
                                              renew_before_days=SETTINGS.cert_validity_days + 1))
    write_material(paths.directory, renewed)
    return x509.load_pem_x509_certificate(renewed.tls_cert).serial_number


def test_no_request_fails_while_the_certificate_is_renewed(port: int, cert_paths: CertificatePaths) -> None:
    trust = ssl.create_default_context(cafile=str(cert_paths.ca_cert))
    requests = bodies()
    failures: list[str] = []
    answered = itertools.count()
    stop = threading.Event()

    def client(offset: int) -> None:
        position = offset
        while not stop.is_set():
            connection = http.client.HTTPSConnection("127.0.0.1", port, context=trust, timeout=10)
            try:
                for _ in range(3):  # a few requests per connection, then a new handshake
                    path, body = requests[position % len(requests)]
                    position += 1
                    connection.request("POST", path, body, {"Content-Type": "application/json"})
                    reply = connection.getresponse()
                    data = reply.read()
                    if reply.status != 200 or "allowed" not in orjson.loads(data)["response"]:
                        failures.append(f"{path}: HTTP {reply.status} {data[:200]!r}")
                    next(answered)
            except (OSError, http.client.HTTPException, ValueError) as exc:
                failures.append(f"{type(exc).__name__}: {exc}")
            finally:
                connection.close()

    def serial_of_a_new_connection() -> int:
        connection = http.client.HTTPSConnection("127.0.0.1", port, context=trust, timeout=10)
        try:
            connection.request("GET", "/healthz")
            connection.getresponse().read()
            return peer_serial(connection)
        finally:
            connection.close()

    workers = [threading.Thread(target=client, args=(i,)) for i in range(CLIENTS)]
    for worker in workers:
        worker.start()
    try:
        served = [serial_of_a_new_connection()]
        for _rotation in range(2):
            time.sleep(0.3)
            new_serial = renew(cert_paths)
            assert new_serial not in served
            deadline = time.monotonic() + WAIT_SECONDS
            while serial_of_a_new_connection() != new_serial:
                assert time.monotonic() < deadline, "the renewed certificate was never served"
                time.sleep(0.05)
            served.append(new_serial)
        time.sleep(0.3)
    finally:
        stop.set()
        for worker in workers:
            worker.join(15)
    assert failures == []
    assert next(answered) > CLIENTS
