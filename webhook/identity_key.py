"""The requested-by signing key of the workloads wing (webhook/workloads/identity.py signs with it): read from
the configured file, or made once under the state directory. Core, not the wing's, because `kgwe serve`,
`kgwe review` and `kgwe explain` read it before anything is built (webhook/command_input.py
`check_identity_key`): without it no workload is admitted."""

from __future__ import annotations

import logging
import os
import secrets
import time
from pathlib import Path

from webhook.state import state_dir

log = logging.getLogger("kgwe.identity")

KEY_BYTES = 32


class IdentityKeyError(RuntimeError):
    """The signing key cannot be read or made: `kgwe serve` does not start without it."""


def load_key(path: Path | None) -> bytes:
    """The signing key. With a path (the chart's Secret, mounted) it must exist; without one it is made
    once under the state directory and shared by every worker and `kgwe review` on this machine."""
    if path is not None:
        try:
            key = path.read_bytes().strip()
        except OSError as exc:
            raise IdentityKeyError(f"requested-by signing key {path}: {exc}") from exc
        if len(key) < 16:
            raise IdentityKeyError(f"requested-by signing key {path}: fewer than 16 bytes")
        return key
    file = state_dir() / "identity.key"
    try:
        return file.read_bytes().strip()
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise IdentityKeyError(f"requested-by signing key {file}: {exc}") from exc
    file.parent.mkdir(parents=True, exist_ok=True)
    try:
        # O_EXCL: of several workers starting together exactly one writes the key; the others read it.
        descriptor = os.open(file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return _read_when_written(file)
    with os.fdopen(descriptor, "wb") as handle:
        handle.write(secrets.token_hex(KEY_BYTES).encode())
    log.info("requested-by signing key made in %s", file)
    return file.read_bytes().strip()


def _read_when_written(file: Path) -> bytes:
    for _ in range(100):
        key = file.read_bytes().strip()
        if len(key) >= 16:
            return key
        time.sleep(0.01)
    raise IdentityKeyError(f"requested-by signing key {file} stays empty")
