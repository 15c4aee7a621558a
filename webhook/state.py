"""Where KGWE keeps what it makes for itself (self-signed certificates, the gang file store, the signing key).

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
