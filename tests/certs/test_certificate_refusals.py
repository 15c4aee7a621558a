"""Certificate reload refuses pairs that must not be served, while the running server keeps its pair,
and `kgwe certs client` makes what the API server needs to authenticate to the webhook."""

from __future__ import annotations

import base64
import datetime as dt
import http.client
import ssl
import stat
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID
from patience import WAIT_SECONDS
from prometheus_client import REGISTRY
from server_support import RunningServer

from certs.authority import new_serving_cert
from certs.files import CertificatePaths, read_material, write_file

DAY = dt.timedelta(days=1)


def refused(reason: str) -> float:
    return REGISTRY.get_sample_value("kgwe_certificate_reload_refused_total", {"reason": reason}) or 0.0


def served_serial(server: RunningServer) -> int:
    host, port = "127.0.0.1", int(server.url.rsplit(":", 1)[1])
    # Look at the certificate only: an expired or future one must never reach a client to be judged.
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    connection = http.client.HTTPSConnection(host, port, context=context, timeout=10)
    try:
        connection.connect()
        assert connection.sock is not None
        der = connection.sock.getpeercert(binary_form=True)
        assert der is not None
        return x509.load_der_x509_certificate(der).serial_number
    finally:
        connection.close()


def leaf(paths: CertificatePaths, now: dt.datetime, days: int = 90) -> tuple[bytes, bytes]:
    material = read_material(paths.directory)
    assert material is not None
    return new_serving_cert(
        material.ca_bundle, material.ca_key, ["kgwe-webhook", "localhost"], ["127.0.0.1"], days, now
    )


def install(paths: CertificatePaths, pair: tuple[bytes, bytes]) -> None:
    # As `kgwe certs` writes them: the key first.
    write_file(paths.tls_key, pair[1], 0o600)
    write_file(paths.tls_cert, pair[0], 0o644)


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def _expired(paths: CertificatePaths) -> tuple[bytes, bytes]:
    return leaf(paths, _now() - 100 * DAY, days=90)


def _not_yet_valid(paths: CertificatePaths) -> tuple[bytes, bytes]:
    return leaf(paths, _now() + 2 * DAY)


def _mismatched(paths: CertificatePaths) -> tuple[bytes, bytes]:
    cert, _ = leaf(paths, _now())
    _, other_key = leaf(paths, _now())
    return cert, other_key


@pytest.mark.parametrize(
    ("make", "reason"),
    [(_expired, "expired"), (_not_yet_valid, "not_yet_valid"), (_mismatched, "key_mismatch")],
    ids=["expired", "not-yet-valid", "mismatched-key"],
)
def test_bad_pair_is_refused_and_the_old_one_keeps_serving(
    server: RunningServer,
    cert_paths: CertificatePaths,
    make: Callable[[CertificatePaths], tuple[bytes, bytes]],
    reason: str,
) -> None:
    before = refused(reason)
    serial = served_serial(server)
    install(cert_paths, make(cert_paths))
    give_up = time.monotonic() + WAIT_SECONDS
    while refused(reason) == before:  # the server's poller (0.05 s) has looked at the new files
        assert time.monotonic() < give_up, "the new pair was never looked at"
        time.sleep(0.02)
    assert served_serial(server) == serial
    assert server.tls.certificate is not None and server.tls.certificate.serial_number == serial
    with server.client() as client:
        assert client.get("/healthz").status_code == 200
    # Refused once, not at every poll.
    time.sleep(0.3)
    assert refused(reason) == before + 1
    # A good pair afterwards is taken.
    good = leaf(cert_paths, _now())
    install(cert_paths, good)
    new_serial = x509.load_pem_x509_certificate(good[0]).serial_number
    while served_serial(server) != new_serial:
        assert time.monotonic() < give_up, "the good pair was never served"
        time.sleep(0.05)


def test_expired_pair_is_not_served_at_start(cert_paths: CertificatePaths) -> None:
    from certs.reloader import ReloadingSSLContext

    install(cert_paths, _expired(cert_paths))
    tls = ReloadingSSLContext(cert_paths.tls_cert, cert_paths.tls_key)
    assert not tls.loaded and tls.last_error and "expired" in tls.last_error


def test_certs_client_makes_the_api_server_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from certs.commands import run

    out = tmp_path / "apiserver"
    args = ["client", "--out-dir", str(out), "--service", "hook", "--namespace", "gpu"]
    assert run(args) == 0
    assert "new client CA and certificate" in capsys.readouterr().out
    ca = x509.load_pem_x509_certificate((out / "client-ca.crt").read_bytes())
    cert = x509.load_pem_x509_certificate((out / "client.crt").read_bytes())
    cert.verify_directly_issued_by(ca)
    assert cert.subject.rfc4514_string() == "CN=kgwe-apiserver-client"
    usages = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(usages) == [ExtendedKeyUsageOID.CLIENT_AUTH]
    for private in ("client-ca.key", "client.key", "apiserver-webhook-kubeconfig.yaml"):
        assert stat.S_IMODE((out / private).stat().st_mode) == 0o600
    kubeconfig = yaml.safe_load((out / "apiserver-webhook-kubeconfig.yaml").read_text())
    user = kubeconfig["users"][0]
    assert user["name"] == "hook.gpu.svc"  # the API server picks the entry by the Service's DNS name
    assert base64.b64decode(user["user"]["client-certificate-data"]) == (out / "client.crt").read_bytes()
    admission = yaml.safe_load((out / "admission-configuration.yaml").read_text())
    assert admission["kind"] == "AdmissionConfiguration"
    assert {p["name"] for p in admission["plugins"]} == {"ValidatingAdmissionWebhook", "MutatingAdmissionWebhook"}
    assert all(p["configuration"]["kubeConfigFile"].endswith("apiserver-webhook-kubeconfig.yaml")
               for p in admission["plugins"])
    # Run again: the CA and the certificate are reused.
    before = (out / "client.crt").read_bytes()
    assert run(args) == 0
    assert "is current" in capsys.readouterr().out and (out / "client.crt").read_bytes() == before
    # Another port names the user entry with it.
    assert run([*args, "--port", "8443"]) == 0
    kubeconfig = yaml.safe_load((out / "apiserver-webhook-kubeconfig.yaml").read_text())
    assert kubeconfig["users"][0]["name"] == "hook.gpu.svc:8443"
