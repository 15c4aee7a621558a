"""A server SSLContext that picks up a renewed certificate without a restart.

The files are polled (mtime, size, inode — following the symlinks of a mounted Secret) and, on a
change, `load_cert_chain` is called again on the SAME context: OpenSSL copies the certificate into
each connection when it is created, so new handshakes get the new certificate while connections in
flight keep theirs. A pair is first checked and loaded into a scratch context: a certificate caught
half-way through a rotation (new certificate, old key), an expired certificate or one not valid yet
is refused (logged once, counted in kgwe_certificate_reload_refused_total) and the files are looked
at again at the next poll; the serving context keeps the pair it has.

With a client CA file, the context also asks clients for a certificate (CERT_OPTIONAL: a client
without one still connects, a client whose certificate the CA did not sign fails the handshake) so
the HTTP shell can tell the API server from anyone else (webhook/server/callers.py).
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import ssl
import tempfile
from collections.abc import Callable
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from prometheus_client import Counter

log = logging.getLogger(__name__)

Fingerprint = tuple[tuple[int, int, int], ...]

RELOAD_REFUSED = Counter(
    "kgwe_certificate_reload_refused_total",
    "Serving certificate pairs not loaded, by reason: unreadable, invalid, key_mismatch, expired, not_yet_valid.",
    ["reason"],
)


class RefusedPair(ValueError):
    """A certificate pair that must not be served; `reason` is the metric label."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def server_context(client_ca: bytes | None = None) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.set_alpn_protocols(["http/1.1"])
    if client_ca is not None:
        # Optional at the handshake: probes and scrapers carry no certificate; the admission endpoints
        # refuse such callers per request. A certificate that is presented must chain to the client CA.
        context.verify_mode = ssl.CERT_OPTIONAL
        context.load_verify_locations(cadata=client_ca.decode("ascii"))
    return context


def _public_der(key: object) -> bytes:
    public = key.public_key()  # type: ignore[attr-defined]
    return bytes(public.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo))


def check_pair(cert: bytes, key: bytes, now: dt.datetime | None = None) -> x509.Certificate:
    """The leaf certificate of a PEM pair fit to serve now; RefusedPair says why one is not."""
    now = now or dt.datetime.now(dt.UTC)
    try:
        certificate = x509.load_pem_x509_certificate(cert)
        private_key = serialization.load_pem_private_key(key, password=None)
    except (ValueError, TypeError) as exc:
        raise RefusedPair("invalid", f"certificate or key is not valid PEM: {exc}") from exc
    if _public_der(private_key) != _public_der(certificate):
        raise RefusedPair("key_mismatch", "the private key does not belong to the certificate")
    if certificate.not_valid_after_utc <= now:
        raise RefusedPair("expired", f"the certificate expired at {certificate.not_valid_after_utc.isoformat()}")
    if certificate.not_valid_before_utc > now:
        raise RefusedPair(
            "not_yet_valid", f"the certificate is not valid before {certificate.not_valid_before_utc.isoformat()}"
        )
    return certificate


def _load_pair(context: ssl.SSLContext, cert: bytes, key: bytes) -> None:
    # load_cert_chain reads files only; the snapshot goes to a private directory so the pair loaded is
    # exactly the pair that was read, whatever happens to the watched files meanwhile.
    with tempfile.TemporaryDirectory(prefix="kgwe-tls-") as tmp:
        cert_file, key_file = Path(tmp) / "tls.crt", Path(tmp) / "tls.key"
        cert_file.write_bytes(cert)
        key_file.touch(mode=0o600)
        key_file.write_bytes(key)
        context.load_cert_chain(cert_file, key_file)


class ReloadingSSLContext:
    """Owns `context`; call `reload_if_changed()` every `poll_seconds` on the thread that does the handshakes
    (`kgwe serve` does so from its `certificate-reload` task, webhook/server/serving_loop.py), so that no
    handshake sees a half-load."""

    def __init__(
        self,
        cert_file: str | os.PathLike[str],
        key_file: str | os.PathLike[str],
        poll_seconds: float = 10.0,
        on_load: Callable[[x509.Certificate], None] | None = None,
        client_ca_file: str | os.PathLike[str] | None = None,
    ) -> None:
        """Load the pair now (see `loaded`, `last_error`). With `client_ca_file`, clients are asked for a
        certificate signed by it; the file is read here, once (a new client CA needs a restart)."""
        self.cert_file = Path(cert_file)
        self.key_file = Path(key_file)
        self.poll_seconds = poll_seconds
        self.on_load = on_load
        self.client_ca_file = Path(client_ca_file) if client_ca_file is not None else None
        self.client_ca: bytes | None = None
        if self.client_ca_file is not None:
            self.client_ca = self.client_ca_file.read_bytes()
            if b"-----BEGIN CERTIFICATE-----" not in self.client_ca:
                raise ValueError(f"client CA file {self.client_ca_file} holds no PEM certificate")
        self.context = server_context(self.client_ca)
        self.certificate: x509.Certificate | None = None
        self.last_error: str | None = None
        self._fingerprint: Fingerprint | None = None
        self.reload_if_changed()

    @property
    def loaded(self) -> bool:
        return self.certificate is not None

    @property
    def not_after(self) -> dt.datetime | None:
        return self.certificate.not_valid_after_utc if self.certificate is not None else None

    def _stat(self) -> Fingerprint:
        stats = (os.stat(self.cert_file), os.stat(self.key_file))
        return tuple((s.st_mtime_ns, s.st_size, s.st_ino) for s in stats)

    def reload_if_changed(self) -> bool:
        """Load the pair if the files changed since the last successful load; True when a new pair is served."""
        try:
            fingerprint = self._stat()
            if fingerprint == self._fingerprint:
                return False
            cert, key = self.cert_file.read_bytes(), self.key_file.read_bytes()
            certificate = check_pair(cert, key)
            _load_pair(server_context(), cert, key)
            _load_pair(self.context, cert, key)
        except (OSError, ssl.SSLError, ValueError) as exc:
            reason = exc.reason if isinstance(exc, RefusedPair) else "invalid"
            if isinstance(exc, OSError):
                reason = "unreadable"
            if str(exc) != self.last_error:
                # Counted and logged once per distinct problem, not at every poll.
                RELOAD_REFUSED.labels(reason).inc()
                log.warning("serving certificate not (re)loaded from %s (%s), keeping the current one: %s",
                            self.cert_file, reason, exc)
            self.last_error = str(exc)
            return False
        self._fingerprint = fingerprint
        self.certificate = certificate
        self.last_error = None
        log.info("serving certificate loaded from %s (serial %x, expires %s)",
                 self.cert_file, certificate.serial_number, certificate.not_valid_after_utc.isoformat())
        if self.on_load is not None:
            self.on_load(certificate)
        return True
