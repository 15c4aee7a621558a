"""The requested-by signing key of the workloads wing (webhook/workloads/identity.py signs with it): read from
the configured file, or made once under the state directory. Core, not the wing's, because `kgwe serve`,
`kgwe review` and `kgwe explain` read it before anything is built (webhook/command_input.py
`check_identity_key`): without it no workload is admitted."""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import tempfile
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
        return _whole(file, file.read_bytes().strip())
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise IdentityKeyError(f"requested-by signing key {file}: {exc}") from exc
    file.parent.mkdir(parents=True, exist_ok=True)
    # Written whole under a name of its own, then linked into place: of several workers starting together
    # exactly one link succeeds, and no worker ever reads a key half written (however long the writer waits
    # for a CPU between its open and its write).
    descriptor, written = tempfile.mkstemp(prefix=".identity.key.", dir=file.parent)
    try:
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(secrets.token_hex(KEY_BYTES).encode())
            handle.flush()
            os.fsync(handle.fileno())
        try:
            os.link(written, file)
            log.info("requested-by signing key made in %s", file)
        except FileExistsError:
            pass  # another worker's key is in place: every worker signs with that one
    except OSError as exc:
        raise IdentityKeyError(f"requested-by signing key {file}: {exc}") from exc
    finally:
        with contextlib.suppress(OSError):
            os.unlink(written)
    return _whole(file, file.read_bytes().strip())


def _whole(file: Path, key: bytes) -> bytes:
    if len(key) < 16:
        raise IdentityKeyError(f"requested-by signing key {file}: fewer than 16 bytes (remove it: a new one is made)")
    return key
