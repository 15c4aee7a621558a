"""The `cel` fixture (cel-python, as the API server evaluates CEL) shared with tests/chart."""

from __future__ import annotations

from chart_support import cel  # noqa: F401
