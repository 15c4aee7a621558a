"""Certificate tests serve over real HTTPS with the server tests' fixtures (tests/server/server_support.py)."""

from __future__ import annotations

from server_support import cert_paths, cert_settings, runtime, server  # noqa: F401
