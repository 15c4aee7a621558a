"""glibc malloc's share of a serve worker's resident memory (issue 36).

A worker's threads (the watch, the inventory's and the costs' warm builds, the controllers, the thread pool)
each get a malloc arena of their own, up to eight per CPU, and memory freed in one arena is not reused by
another: after the background builds of a large cluster the worker held tens of MiB per arena of free
pieces. The GIL lets one thread allocate at a time anyway, so two arenas lose nothing to contention.
`malloc_trim` hands the free pages in the middle of the heap back to the system: bench/bench_memory.py measures
what it would free after the background builds (about 5 %); the server does not call it.

Elsewhere than glibc (musl, macOS) both are no-ops.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
from functools import cache

M_ARENA_MAX = -8  # glibc's malloc.h
ARENAS = 2


@cache
def _libc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name)
    except OSError:
        return None
    return libc if hasattr(libc, "mallopt") and hasattr(libc, "malloc_trim") else None


def bound_arenas(arenas: int = ARENAS) -> bool:
    """At most `arenas` malloc arenas from now on, unless MALLOC_ARENA_MAX says otherwise (the operator's
    word). Call it before the worker starts threads: arenas made already stay. Returns whether it was set."""
    libc = _libc()
    if libc is None or os.environ.get("MALLOC_ARENA_MAX"):
        return False
    return bool(libc.mallopt(M_ARENA_MAX, arenas))


def release_free_memory() -> None:
    """Hand the heap's free pages back to the system (glibc's `malloc_trim(0)`)."""
    libc = _libc()
    if libc is not None:
        libc.malloc_trim(0)
