"""Where KGWE keeps what it makes for itself (self-signed certificates, file stores, the signing key)
and what lives only as long as `kgwe serve` runs (the workers' shared quota state).

A leaf module (standard library only) so that every layer may ask for the directory without importing
the server: `KGWE_STATE_DIR` wins, then `$XDG_STATE_HOME/kgwe`, then `~/.local/state/kgwe`.
"""

from __future__ import annotations

import os
from pathlib import Path


def state_dir() -> Path:
    """Where KGWE keeps what it makes for itself (the self-signed certificates)."""
    explicit = os.environ.get("KGWE_STATE_DIR")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "kgwe"


def runtime_dir() -> Path:
    """Where `kgwe serve` keeps what lives only as long as it runs (the workers' quota state file): memory
    when there is a runtime directory for it, so that the state file costs no disk I/O per reservation.

    `KGWE_RUNTIME_DIR`, else `$XDG_RUNTIME_DIR/kgwe`, else `/dev/shm/kgwe-UID`, else the state directory.
    """
    explicit = os.environ.get("KGWE_RUNTIME_DIR")
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_RUNTIME_DIR")
    if xdg and Path(xdg).is_dir():
        return Path(xdg) / "kgwe"
    if Path("/dev/shm").is_dir() and os.access("/dev/shm", os.W_OK):
        return Path("/dev/shm") / f"kgwe-{os.getuid()}"
    return state_dir()


def quota_state_file(port: int, parent_pid: int) -> Path:
    """The quota state file the workers of one `kgwe serve` share (the parent removes it at exit)."""
    return runtime_dir() / "quota" / f"{port}-{parent_pid}.json"
