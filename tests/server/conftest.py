"""The fixtures of tests/server: defined with the helpers in server_support.py, which the tests import by name
(a conftest is never imported by name: with several folders in one session the name is ambiguous)."""

from __future__ import annotations

from server_support import cert_paths, cert_settings, runtime, server  # noqa: F401
