"""A server SSLContext that picks up a renewed certificate without a restart.

The files are polled (mtime, size, inode — following the symlinks of a mounted Secret) and, on a
change, `load_cert_chain` is called again on the SAME context: OpenSSL copies the certificate into
each connection when it is created, so new handshakes get the new certificate while connections in
flight keep theirs. A pair is first loaded into a scratch context: a certificate caught half-way
through a rotation (new certificate, old key) is refused and retried at the next poll, and the
serving context is never left with a mismatched pair.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import os
import ssl
import tempfile
from collections.abc import Callable
from pathlib import Path

from cryptography import x509

log = logging.getLogger(__name__)

Fingerprint = tuple[tuple[int, int, int], ...]


def server_context() -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.set_alpn_protocols(["http/1.1"])
    return context


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
    """Owns `context`; call `reload_if_changed()` (or run `run()` on the server's event loop)."""

    def __init__(
        self,
        cert_file: str | os.PathLike[str],
        key_file: str | os.PathLike[str],
        poll_seconds: float = 10.0,
        on_load: Callable[[x509.Certificate], None] | None = None,
    ) -> None:
        self.cert_file = Path(cert_file)
        self.key_file = Path(key_file)
        self.poll_seconds = poll_seconds
        self.on_load = on_load
        self.context = server_context()
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
            _load_pair(server_context(), cert, key)
            certificate = x509.load_pem_x509_certificate(cert)
            _load_pair(self.context, cert, key)
        except (OSError, ssl.SSLError, ValueError) as exc:
            if str(exc) != self.last_error:
                log.warning("serving certificate not (re)loaded from %s, keeping the current one: %s",
                            self.cert_file, exc)
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

    async def run(self) -> None:
        """Poll forever; run it on the event loop that does the handshakes, so no handshake sees a half-load."""
        while True:
            await asyncio.sleep(self.poll_seconds)
            self.reload_if_changed()
