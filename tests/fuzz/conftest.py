"""Fuzzing the webhook: hypothesis over AdmissionReviews and pods, schemathesis over the JSON API's OpenAPI.

Example counts are bounded so the suite stays fast; `KGWE_FUZZ_EXAMPLES` raises them for a longer hunt, and
the `slow` variant runs five times as many.

schemathesis' pytest plugin is turned off for the suite (`-p no:schemathesis` in pyproject.toml: loading it
cost every pytest process about 0.9 CPU-s) and turned on here, where `schema.parametrize()` needs it.
"""

from __future__ import annotations

import pytest
from schemathesis.pytest import plugin as schemathesis_plugin


def pytest_configure(config: pytest.Config) -> None:
    if not config.pluginmanager.is_registered(schemathesis_plugin):
        config.pluginmanager.register(schemathesis_plugin, "schemathesis-for-fuzz")
