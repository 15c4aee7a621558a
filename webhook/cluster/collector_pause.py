"""Python's cyclic garbage collector paused while the API's lists are read.

A list of 150,000 pods is millions of new dicts and lists that all survive: every time the survivors grow by a
quarter the collector walks all of them again, for cycles there are none of (JSON has no cycles). Measured on
2 CPUs, reading and slimming 150,000 pods took 34.5 s with the collector on, 21 s of it collecting, and 10.4 s
with it off (bench/bench_scale.py; docs/performance.md "Scale"). The collector is paused while any kind's list
is being read and resumed when the last one ends; reference counting frees everything else as usual, and
what cycles other threads make meanwhile are collected once it resumes. A collector someone else turned off
stays off.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager


class _Pause:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.holders = 0
        self.paused_here = False

    @contextmanager
    def held(self) -> Iterator[None]:
        with self.lock:
            self.holders += 1
            if self.holders == 1 and gc.isenabled():
                gc.disable()
                self.paused_here = True
        try:
            yield
        finally:
            with self.lock:
                self.holders -= 1
                if self.holders == 0 and self.paused_here:
                    self.paused_here = False
                    gc.enable()


_PAUSE = _Pause()


def collector_paused() -> AbstractContextManager[None]:
    """While held (by any thread), the cyclic collector does not run."""
    return _PAUSE.held()
