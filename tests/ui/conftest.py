"""Fixtures of the web UI tests: Debian's chromium (installed when missing, else skipped), a real
`kgwe serve --cluster examples/cluster`, and a fresh browser page that may talk to that server only."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack
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


class _SharedBrowser:
    """One browser for the files that use one, which tests/conftest.py runs one after another (and on one
    pytest-xdist worker). It is closed as soon as the next test is not of such a file:
    Playwright's sync API keeps an asyncio loop running in this thread while it is open, and a test that needs a
    loop of its own (`asyncio.run()`) could not start one."""

    def __init__(self) -> None:
        self._opened: ExitStack | None = None
        self._browser: Any = None

    def get(self, executable: Path) -> Any:
        if self._opened is None:
            opened = ExitStack()
            self._browser = opened.enter_context(chromium_browser(executable))
            self._opened = opened
        return self._browser

    def close(self) -> None:
        opened, self._opened, self._browser = self._opened, None, None
        if opened is not None:
            opened.close()


_SHARED = _SharedBrowser()


@pytest.fixture
def browser(chromium: Path) -> Any:
    return _SHARED.get(chromium)


@pytest.hookimpl(trylast=True)  # after the page's context is closed
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    if nextitem is None or nextitem.get_closest_marker("browser_file") is None:
        _SHARED.close()


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
