"""The per-core bench's counters (bench/bench_percore.py): a process's user and system CPU, faults and context
switches read from /proc, so that each row says where a request's CPU went beside the instruction counts. No speed
is asserted."""

from __future__ import annotations

import os
import sys
import threading
import time

import pytest
from bench_percore import _CpuClock, _process_counters

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


def _burn(seconds: float) -> None:
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass


def test_the_clock_counts_this_process_user_time_and_its_threads_switches() -> None:
    slept, done = threading.Event(), threading.Event()

    def sleeper() -> None:  # each sleep gives the CPU up: a voluntary switch of a thread that is not the main one
        for _ in range(20):
            time.sleep(0.001)
        slept.set()
        done.wait()

    cpu = min(os.sched_getaffinity(0))
    clock = _CpuClock(os.getpid(), {cpu})
    clock.start()
    _burn(0.05)
    waiter = threading.Thread(target=sleeper)
    waiter.start()
    slept.wait()
    seconds = clock.stop()  # the thread still lives: its switches are counted
    done.set()
    waiter.join()
    spent = clock.spent
    assert seconds is not None and spent is not None
    assert seconds == spent["user_s"] + spent["system_s"] >= 0.03
    # The CPUs' busy time counts everyone's: at least this process's on them (ticks round both to 10 ms).
    assert spent["cpus_busy_s"] >= 0 and spent["wall_s"] > 0
    assert spent["voluntary"] - spent["loop_voluntary"] >= 20
    assert spent["involuntary"] >= spent["loop_involuntary"] >= 0


def test_a_process_that_has_ended_has_no_counters() -> None:
    assert _process_counters(2**22 + 1) is None  # above the kernel's largest pid
