"""Certificate material on disk: ca.crt (trust bundle), ca.key, tls.crt, tls.key; keys readable by the owner only."""

from __future__ import annotations

import datetime as dt
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from certs.authority import Changes, Material, Settings, reconcile

CA_CERT = "ca.crt"
CA_KEY = "ca.key"
TLS_CERT = "tls.crt"
TLS_KEY = "tls.key"


@dataclass(frozen=True)
class CertificatePaths:
    directory: Path

    @property
    def ca_cert(self) -> Path:
        return self.directory / CA_CERT

    @property
    def ca_key(self) -> Path:
        return self.directory / CA_KEY

    @property
    def tls_cert(self) -> Path:
        return self.directory / TLS_CERT

    @property
    def tls_key(self) -> Path:
        return self.directory / TLS_KEY


def write_file(path: Path, data: bytes, mode: int) -> None:
    """Replace `path` atomically (a reader sees the old or the new content, never half of it)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def read_material(directory: Path) -> Material | None:
    """The material in `directory` (serving pair empty when missing), or None when there is no CA."""
    paths = CertificatePaths(directory)
    if not (paths.ca_cert.is_file() and paths.ca_key.is_file()):
        return None
    tls = [p.read_bytes() if p.is_file() else b"" for p in (paths.tls_cert, paths.tls_key)]
    return Material(paths.ca_cert.read_bytes(), paths.ca_key.read_bytes(), tls[0], tls[1])


def write_material(directory: Path, material: Material) -> CertificatePaths:
    # The key is written before the certificate: a reloader that sees a new certificate finds its key.
    paths = CertificatePaths(directory)
    write_file(paths.ca_key, material.ca_key, 0o600)
    write_file(paths.ca_cert, material.ca_bundle, 0o644)
    write_file(paths.tls_key, material.tls_key, 0o600)
    write_file(paths.tls_cert, material.tls_cert, 0o644)
    return paths


def ensure_files(
    directory: Path, settings: Settings, *, rotate_ca: bool = False, now: dt.datetime | None = None
) -> tuple[CertificatePaths, Changes]:
    """Reuse the CA and serving certificate in `directory`; create or renew what needs it."""
    existing = read_material(directory)
    material, changes = reconcile(existing, settings, rotate_ca=rotate_ca, now=now)
    if changes.changed:
        write_material(directory, material)
    return CertificatePaths(directory), changes
