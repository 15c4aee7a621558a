"""Fixtures of the web UI tests: Debian's chromium (installed when missing, else skipped), a real
`kgwe serve --cluster examples/cluster`, and a fresh browser page that may talk to that server only."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ui_harness import BrowserUnavailable, KgweServer, chromium_browser, ensure_chromium, kgwe_serve, open_page


@pytest.fixture(scope="session")
def chromium() -> Path:
    pytest.importorskip("playwright.sync_api", reason="the playwright package is not installed (pip install .[test])")
    try:
        return ensure_chromium()
    except BrowserUnavailable as exc:
        pytest.skip(f"no headless browser: {exc}")


# One browser per module, not per session: Playwright's sync API keeps an asyncio loop running in this thread
# while it is open, and a test of another folder that a worker runs afterwards (pytest-xdist) could not
# start an event loop of its own (`asyncio.run() cannot be called from a running event loop`).
@pytest.fixture(scope="module")
def browser(chromium: Path) -> Iterator[Any]:
    with chromium_browser(chromium) as launched:
        yield launched


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KgweServer]:
    with kgwe_serve(tmp_path_factory.mktemp("kgwe-serve")) as running:
        yield running


@pytest.fixture
def page(browser: Any, server: KgweServer) -> Iterator[Any]:
    """A page in a fresh browser context; the test fails if the page logged an error or left the server."""
    context, opened, problems = open_page(browser, server)
    opened.set_default_timeout(10_000)
    yield opened
    context.close()
    assert problems.errors == [], "the page reported errors"
    assert problems.foreign_requests == [], "the page asked for something other than the KGWE server"
