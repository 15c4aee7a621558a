"""The example cluster loaded into a runtime."""

from __future__ import annotations

import pytest
from placement_support import EXAMPLES, Admit

from webhook.config import load_config
from webhook.runtime import Runtime, build_runtime


@pytest.fixture(scope="session")
def runtime() -> Runtime:
    return build_runtime(load_config(EXAMPLES / "config.yaml"), EXAMPLES / "cluster")


@pytest.fixture(scope="session")
def admit(runtime: Runtime) -> Admit:
    return Admit(runtime)
