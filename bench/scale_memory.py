"""The worker's resident memory through a bench/bench_scale.py run: VmRSS sampled every 100 ms from spawn to the
end, with the bench's phases marked, so that a peak (VmHWM) is placed in time and in a phase, not only measured."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


def _rss_kib(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:  # the worker has exited, or not yet started
        return None
    return None


class RssTrace:
    """Samples (seconds since the trace started, VmRSS in KiB) and the phases the bench marks."""

    def __init__(self, pid: int, every: float = 0.1) -> None:
        self.pid, self.every = pid, every
        self.started = time.monotonic()
        self.samples: list[tuple[float, int]] = []
        self.marks: list[tuple[float, str]] = []
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rss-trace", daemon=True)

    def _run(self) -> None:
        while not self._done.wait(self.every):
            kib = _rss_kib(self.pid)
            if kib is not None:
                self.samples.append((time.monotonic() - self.started, kib))

    def mark(self, phase: str) -> None:
        self.marks.append((time.monotonic() - self.started, phase))

    def summary(self, every_s: float = 1.0) -> dict[str, Any]:
        """The peak sample and the phase it fell in, each phase's highest, and the series thinned to `every_s`."""
        if not self.samples:
            return {}

        def phase_at(at: float) -> str:
            named = "start-up"
            for mark_at, phase in self.marks:
                if mark_at <= at:
                    named = phase
            return named

        peak_at, peak = max(self.samples, key=lambda sample: sample[1])
        by_phase: dict[str, int] = {}
        for at, kib in self.samples:
            phase = phase_at(at)
            by_phase[phase] = max(by_phase.get(phase, 0), kib)
        series, next_at = [], 0.0
        for at, kib in self.samples:
            if at >= next_at:
                series.append([round(at, 1), kib // 1024])
                next_at = at + every_s
        return {"peak_mib": peak // 1024, "peak_at_s": round(peak_at, 1), "peak_phase": phase_at(peak_at),
                "marks_s": {phase: round(at, 1) for at, phase in self.marks},
                "phase_peak_mib": {phase: kib // 1024 for phase, kib in by_phase.items()},
                "series_mib": series}


@contextmanager
def tracing(pid: int) -> Iterator[RssTrace]:
    trace = RssTrace(pid)
    trace._thread.start()
    try:
        yield trace
    finally:
        trace._done.set()
        trace._thread.join(5)
