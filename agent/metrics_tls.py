"""The serving certificate of the agent's HTTPS `/metrics`: from files, or self-signed, as kube-rbac-proxy does.

- `--metrics-cert-file` and `--metrics-key-file` (a Secret mounted from cert-manager, say): read at start and
  again when either file changes (checked at most every CHECK_SECONDS), so a renewed certificate is served
  without a restart; a pair that does not load leaves the last good one in use (and says so once).
- Neither: a self-signed certificate (ECDSA P-256, one year) made at start, for the node's names and
  loopback, and made anew when less than a month is left. Its key never touches a disk longer than loading
  it takes. Scrapers then skip verification (`insecure_skip_verify`) and rely on the token: the transport is
  encrypted, the server not authenticated (docs/usage.md).

Each accepted connection is wrapped with the context current at accept time (agent/metrics_http.py), so a
new certificate never changes a context a handshake is using.
"""

from __future__ import annotations

import datetime
import ipaddress
import logging
import os
import ssl
import tempfile
import threading
import time
from collections.abc import Callable, Sequence

log = logging.getLogger("kgwe.agent.metrics")

CHECK_SECONDS = 10.0
SELF_SIGNED_DAYS = 365
RENEW_BEFORE_DAYS = 30


class TlsError(Exception):
    """The certificate files cannot be read or do not hold a certificate and its key."""


def _context(cert_file: str, key_file: str) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(cert_file, key_file)
    except (OSError, ssl.SSLError) as exc:
        raise TlsError(f"cannot load the certificate {cert_file} with the key {key_file}: {exc}") from exc
    return context


def make_self_signed(names: Sequence[str], days: int = SELF_SIGNED_DAYS) -> tuple[bytes, bytes, datetime.datetime]:
    """(certificate PEM, key PEM, not after) of a serving certificate for `names` (DNS names or addresses)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    not_after = now + datetime.timedelta(days=days)
    alternative: list[x509.GeneralName] = []
    for name in dict.fromkeys(n for n in names if n):
        try:
            alternative.append(x509.IPAddress(ipaddress.ip_address(name)))
        except ValueError:
            alternative.append(x509.DNSName(name))
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, (names[0] if names else "kgwe-agent")[:64])])
    certificate = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(not_after)
        .add_extension(x509.SubjectAlternativeName(alternative), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False, key_encipherment=False,
                                     data_encipherment=False, key_agreement=False, key_cert_sign=False,
                                     crl_sign=False, encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    return certificate.public_bytes(serialization.Encoding.PEM), key_pem, not_after


def _context_from_pem(certificate: bytes, key: bytes) -> ssl.SSLContext:
    """ssl loads chains from files only: a private temporary directory, removed as soon as it is loaded."""
    with tempfile.TemporaryDirectory(prefix="kgwe-agent-tls-") as folder:
        cert_file, key_file = os.path.join(folder, "tls.crt"), os.path.join(folder, "tls.key")
        for path, data in ((cert_file, certificate), (key_file, key)):
            descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(descriptor, "wb") as out:
                out.write(data)
        return _context(cert_file, key_file)


class ServingTls:
    """`context()`: the SSLContext a new connection is wrapped with."""

    def __init__(self, cert_file: str = "", key_file: str = "", names: Sequence[str] = (),
                 clock: Callable[[], float] = time.monotonic) -> None:
        if bool(cert_file) != bool(key_file):
            raise TlsError("--metrics-cert-file and --metrics-key-file go together")
        self.cert_file = cert_file
        self.key_file = key_file
        self.names = [*names, "localhost", "127.0.0.1", "::1"]
        self.clock = clock
        self.certificate_pem = b""  # the self-signed certificate served; empty with files
        self._lock = threading.Lock()
        self._checked = clock()
        self._not_after = datetime.datetime.max.replace(tzinfo=datetime.UTC)
        self._failed: str | None = None
        if cert_file:
            self._stamp = self._files_stamp()
            self._context = _context(cert_file, key_file)
        else:
            self._context = self._make_self_signed()

    @property
    def self_signed(self) -> bool:
        return not self.cert_file

    def _make_self_signed(self) -> ssl.SSLContext:
        certificate, key, self._not_after = make_self_signed(self.names)
        self.certificate_pem = certificate
        return _context_from_pem(certificate, key)

    def _files_stamp(self) -> tuple[tuple[int, int, int], ...]:
        stamps = []
        for path in (self.cert_file, self.key_file):
            try:
                found = os.stat(path)
            except OSError:
                stamps.append((0, 0, 0))
            else:
                stamps.append((found.st_mtime_ns, found.st_ino, found.st_size))
        return tuple(stamps)

    def context(self) -> ssl.SSLContext:
        with self._lock:
            now = self.clock()
            if now - self._checked < CHECK_SECONDS:
                return self._context
            self._checked = now
            if self.self_signed:
                left = self._not_after - datetime.datetime.now(datetime.UTC)
                if left < datetime.timedelta(days=RENEW_BEFORE_DAYS):
                    self._context = self._make_self_signed()
                    log.info("made a new self-signed certificate for /metrics")
                return self._context
            stamp = self._files_stamp()
            if stamp == self._stamp:
                return self._context
            try:
                self._context = _context(self.cert_file, self.key_file)
            except TlsError as exc:
                if str(exc) != self._failed:
                    log.warning("%s; still serving the certificate loaded before", exc)
                self._failed = str(exc)
                return self._context  # tried again when the files change again
            finally:
                self._stamp = stamp
            self._failed = None
            log.info("/metrics serves the certificate of %s anew", self.cert_file)
            return self._context
