"""The fixtures of tests/chart: defined with the helpers in chart_support.py, which the tests import by name
(a conftest is never imported by name: with several folders in one session the name is ambiguous)."""

from __future__ import annotations

from chart_support import cel, chart_crds, default, rendered_scenarios  # noqa: F401
