"""The suite's one switch: `--long` runs the tests marked `slow` (long fuzz hunts, soaks), which the default
run leaves out so that nothing in it depends on how busy the machine is (`python3 dev.py test --long`)."""

from __future__ import annotations

import os

import pytest

import webhook.assembly  # noqa: F401  (it registers the wings' steps in the core's seams, as in the product)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--long", action="store_true", default=False,
                     help="also run the tests marked slow: long fuzz hunts and soaks (minutes more)")


def pytest_configure(config: pytest.Config) -> None:
    # Read by tests/fixtures/effort.py when test modules are imported (after this hook, in every xdist worker).
    if config.getoption("--long"):
        os.environ["KGWE_LONG"] = "1"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--long"):
        return
    skip = pytest.mark.skip(reason="slow: runs with --long (python3 dev.py test --long)")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)
