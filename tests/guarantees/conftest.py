"""The fixtures of tests/guarantees: defined with the helpers in guarantees_support.py, which the tests import by name
(a conftest is never imported by name: with several folders in one session the name is ambiguous)."""

from __future__ import annotations

from guarantees_support import serve_cluster, webhook  # noqa: F401
