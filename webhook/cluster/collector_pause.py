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


def freeze_what_was_loaded() -> None:
    """Once the cluster is first loaded: what was listed leaves the collector's view for good (`gc.freeze`, as
    `kgwe serve` does for what start-up built, webhook/server/serving.py settle_heap).

    At 10,000 GPU nodes and 150,000 pods the store holds over a million tracked objects; a full collection walks
    them all, 2.4-3.7 s with the GIL held (measured on 2 CPUs), stalling every admission and the watch, and one
    comes each time the long-lived objects grow by a quarter (the memos and views built after the load). Frozen
    objects are still freed when their last reference goes (a replaced pod); only the cycle search skips them,
    and lists make no cycles. A collector someone turned off is left off."""
    if gc.isenabled():
        gc.collect()
    gc.freeze()


@contextmanager
def built_once(owns_process: bool) -> Iterator[None]:
    """For a command that imports and builds once, answers, and exits (`kgwe review`): the collector paused
    while it imports the engines and builds the runtime. The collector's passes over what import makes, all of
    it surviving, were a tenth of a review's CPU (docs/performance.md, "The command line's start-up").

    Where the command owns the process (`owns_process`: it exits after answering), what was made then also
    leaves the collector's view (`gc.freeze`, without a collection), which spares the passes after the pause
    and the one at exit. A caller in a longer-lived process (a test calling `main([...])`) gets the pause alone:
    the runtime it drops afterwards must stay collectable."""
    with collector_paused():
        yield
        if owns_process:
            gc.freeze()
