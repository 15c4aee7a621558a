"""Certificates: what the authority issues, renewal and CA rotation rules, and hot reload in a running server."""

from __future__ import annotations

import datetime as dt
import http.client
import ipaddress
import ssl
import stat
import threading
import time
from pathlib import Path

import orjson
import pytest
from cryptography import x509
from patience import WAIT_SECONDS
from server_support import GPU_POD, RunningServer, admission_review

from certs.authority import Settings, reconcile
from certs.files import CertificatePaths, ensure_files, read_material, write_material

NOW = dt.datetime(2026, 11, 21, tzinfo=dt.UTC)


def sans(cert_pem: bytes) -> set[str]:
    san = x509.load_pem_x509_certificate(cert_pem).extensions.get_extension_for_class(x509.SubjectAlternativeName)
    return set(san.value.get_values_for_type(x509.DNSName)) | {
        str(ip) for ip in san.value.get_values_for_type(x509.IPAddress)
    }


def test_serving_certificate_names_the_service_and_loopback() -> None:
    material, changes = reconcile(None, Settings(service="hook", namespace="gpu"), now=NOW)
    assert changes.ca_rotated and changes.leaf_issued
    assert sans(material.tls_cert) == {
        "hook", "hook.gpu", "hook.gpu.svc", "hook.gpu.svc.cluster.local", "localhost", "127.0.0.1"
    }
    leaf, ca = material.leaf(), material.current_ca()
    leaf.verify_directly_issued_by(ca)
    assert ca.not_valid_after_utc - NOW == dt.timedelta(days=3650)
    assert leaf.not_valid_after_utc - NOW == dt.timedelta(days=90)
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is True
    assert leaf.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is False


def test_leaf_is_kept_outside_and_renewed_inside_the_window() -> None:
    settings = Settings(renew_before_days=30)
    material, _ = reconcile(None, settings, now=NOW)
    same, changes = reconcile(material, settings, now=NOW + dt.timedelta(days=59))
    assert not changes.changed and same == material
    renewed, changes = reconcile(material, settings, now=NOW + dt.timedelta(days=61))
    assert changes.leaf_issued and not changes.ca_rotated
    assert renewed.ca_bundle == material.ca_bundle and renewed.tls_cert != material.tls_cert


def test_leaf_is_reissued_when_names_change() -> None:
    material, _ = reconcile(None, Settings(service="a"), now=NOW)
    renewed, changes = reconcile(material, Settings(service="b"), now=NOW)
    assert changes.leaf_issued and "b.kgwe.svc" in sans(renewed.tls_cert)


def test_ca_rotation_keeps_old_and_new_ca_in_the_bundle() -> None:
    settings = Settings()
    material, _ = reconcile(None, settings, now=NOW)
    rotated, changes = reconcile(material, settings, rotate_ca=True, now=NOW)
    assert changes.ca_rotated and changes.leaf_issued
    cas = x509.load_pem_x509_certificates(rotated.ca_bundle)
    assert len(cas) == 2 and cas[1] == material.current_ca()
    rotated.leaf().verify_directly_issued_by(cas[0])


def test_ca_near_its_end_is_rotated_and_expired_cas_leave_the_bundle() -> None:
    settings = Settings(ca_validity_days=365)
    material, _ = reconcile(None, settings, now=NOW)
    rotated, changes = reconcile(material, settings, now=NOW + dt.timedelta(days=300))
    assert changes.ca_rotated
    assert len(x509.load_pem_x509_certificates(rotated.ca_bundle)) == 2
    later, _ = reconcile(rotated, settings, rotate_ca=True, now=NOW + dt.timedelta(days=400))
    assert len(x509.load_pem_x509_certificates(later.ca_bundle)) == 2  # the first CA has expired


def test_files_have_private_keys_and_reuse_the_ca(tmp_path: Path) -> None:
    paths, changes = ensure_files(tmp_path, Settings())
    assert changes.changed
    assert stat.S_IMODE(paths.tls_key.stat().st_mode) == 0o600
    assert stat.S_IMODE(paths.ca_key.stat().st_mode) == 0o600
    ca_before = paths.ca_cert.read_bytes()
    paths.tls_cert.unlink()
    paths.tls_key.unlink()
    _, changes = ensure_files(tmp_path, Settings())
    assert changes.leaf_issued and not changes.ca_rotated and paths.ca_cert.read_bytes() == ca_before
    _, changes = ensure_files(tmp_path, Settings())
    assert not changes.changed


def _peer_serial(connection: http.client.HTTPSConnection) -> int:
    assert connection.sock is not None
    der = connection.sock.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der).serial_number


def _request(connection: http.client.HTTPSConnection) -> int:
    connection.request("POST", "/validate?timeout=10s", orjson.dumps(admission_review(GPU_POD)),
                       {"Content-Type": "application/json"})
    response = connection.getresponse()
    response.read()
    return response.status


def test_rotated_certificate_is_served_to_new_connections_without_failing_requests(
    server: RunningServer, cert_paths: CertificatePaths
) -> None:
    host, port = "127.0.0.1", int(server.url.rsplit(":", 1)[1])
    trust = ssl.create_default_context(cafile=str(cert_paths.ca_cert))
    kept = http.client.HTTPSConnection(host, port, context=trust, timeout=10)
    assert _request(kept) == 200
    old_serial = _peer_serial(kept)

    failures: list[str] = []
    stop = threading.Event()

    def load() -> None:
        while not stop.is_set():
            conn = http.client.HTTPSConnection(host, port, context=trust, timeout=10)
            try:
                for _ in range(3):
                    if (status := _request(conn)) != 200:
                        failures.append(f"HTTP {status}")
            except (OSError, http.client.HTTPException) as exc:
                failures.append(repr(exc))
            finally:
                conn.close()

    workers = [threading.Thread(target=load) for _ in range(3)]
    for worker in workers:
        worker.start()
    try:
        # A new leaf from the same CA, as `kgwe certs generate` writes it when the old one nears expiry.
        material = read_material(cert_paths.directory)
        assert material is not None
        renewed, _ = reconcile(material, Settings(service="kgwe-webhook", namespace="kgwe", renew_before_days=91))
        write_material(cert_paths.directory, renewed)
        new_serial = x509.load_pem_x509_certificate(renewed.tls_cert).serial_number
        assert new_serial != old_serial
        deadline = time.monotonic() + WAIT_SECONDS
        while True:
            fresh = http.client.HTTPSConnection(host, port, context=trust, timeout=10)
            assert _request(fresh) == 200
            serial = _peer_serial(fresh)
            fresh.close()
            if serial == new_serial:
                break
            assert time.monotonic() < deadline, "the renewed certificate was never served"
            time.sleep(0.05)
        time.sleep(0.2)
    finally:
        stop.set()
        for worker in workers:
            worker.join(10)
    assert failures == []
    # The connection opened before the rotation goes on with its original certificate.
    assert _request(kept) == 200 and _peer_serial(kept) == old_serial
    kept.close()
    assert server.tls.certificate is not None and server.tls.certificate.serial_number == new_serial


def test_half_written_pair_is_refused_and_the_old_one_kept(cert_paths: CertificatePaths, tmp_path: Path) -> None:
    from certs.reloader import ReloadingSSLContext

    tls = ReloadingSSLContext(cert_paths.tls_cert, cert_paths.tls_key)
    serial = tls.certificate.serial_number if tls.certificate else None
    other, _ = ensure_files(tmp_path / "other", Settings())
    cert_paths.tls_cert.write_bytes(other.tls_cert.read_bytes())  # new certificate, old key
    assert tls.reload_if_changed() is False and tls.last_error
    assert tls.certificate is not None and tls.certificate.serial_number == serial
    cert_paths.tls_key.write_bytes(other.tls_key.read_bytes())
    assert tls.reload_if_changed() is True


def test_ip_san_is_an_address() -> None:
    material, _ = reconcile(None, Settings(ip_addresses=("127.0.0.1", "::1")), now=NOW)
    san = material.leaf().extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert ipaddress.ip_address("::1") in san.get_values_for_type(x509.IPAddress)


def test_certs_generate_reuses_the_ca_and_renews_only_inside_the_window(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from certs.commands import run

    out = tmp_path / "tls"
    assert run(["generate", "--out-dir", str(out), "--service", "hook", "--namespace", "gpu"]) == 0
    assert "new CA and serving certificate" in capsys.readouterr().out
    first = read_material(out)
    assert first is not None and "hook.gpu.svc" in sans(first.tls_cert)
    assert run(["generate", "--out-dir", str(out), "--service", "hook", "--namespace", "gpu"]) == 0
    assert "nothing to do" in capsys.readouterr().out
    assert read_material(out) == first
    # A window longer than what is left of the certificate: renewed, with the same CA.
    assert run(["generate", "--out-dir", str(out), "--service", "hook", "--namespace", "gpu",
                "--cert-validity-days", "200", "--renew-before-days", "150"]) == 0
    assert "new serving certificate" in capsys.readouterr().out
    renewed = read_material(out)
    assert renewed is not None and renewed.ca_bundle == first.ca_bundle and renewed.tls_cert != first.tls_cert
    assert run(["generate", "--out-dir", str(out), "--service", "hook", "--namespace", "gpu", "--rotate-ca"]) == 0
    rotated = read_material(out)
    assert rotated is not None and len(x509.load_pem_x509_certificates(rotated.ca_bundle)) == 2


def test_certs_cli_refuses_bad_arguments(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from certs.commands import run

    with pytest.raises(SystemExit) as exit_info:
        run(["generate", "--out-dir", str(tmp_path), "--renew-before-days", "90"])
    assert exit_info.value.code == 2
    assert "--renew-before-days" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        run(["patch-ca-bundle", "--ca-file", str(tmp_path / "x")])
    not_pem = tmp_path / "not.pem"
    not_pem.write_text("hello")
    assert run(["patch-ca-bundle", "--ca-file", str(not_pem), "--mutating-config", "kgwe"]) == 2
