"""The serve worker's malloc settings (webhook/server/heap.py)."""

from __future__ import annotations

import pytest

from webhook.server import heap


def test_the_operators_malloc_arena_max_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MALLOC_ARENA_MAX", "8")
    assert heap.bound_arenas() is False


def test_arenas_are_bounded_where_glibc_is(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MALLOC_ARENA_MAX", raising=False)
    assert heap.bound_arenas() is (heap._libc() is not None)


def test_free_memory_is_handed_back_without_harm() -> None:
    kept = [bytes(1 << 20) for _ in range(8)]
    del kept[:]
    heap.release_free_memory()
    assert [len(bytes(1 << 20)) for _ in range(2)] == [1 << 20, 1 << 20]
