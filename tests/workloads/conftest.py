"""Fixtures of the workload tests: one HTTPS webhook server on the example cluster per module."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from workload_support import Server, serve


@pytest.fixture(autouse=True)
def _state_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Whatever KGWE makes for itself (the requested-by key of `kgwe review`) stays in the test's directory.
    monkeypatch.setenv("KGWE_STATE_DIR", str(tmp_path / "state"))


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    yield from serve(tmp_path)
