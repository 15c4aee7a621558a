"""Decaying histograms of per-window values (pure), as VPA and Autopilot keep them.

A window's weight halves with every half-life of age, age counted back from the newest window of the
history (not from the clock), so the same history gives the same answer whenever it is read. The
histogram is exact (each window its own bucket, sorted by value): a percentile is the smallest value
whose cumulated weight reaches the share asked, so it is always a value that was seen.

`percentile` over (value, weight) pairs is the definition; `Decay` and `weighted_percentile` give the
very same answers for a cluster's worth of windows: a weight is worked out once per window (it depends
on the window's age only) and the pairs are never built (sorts of floats by key, C-level sums).
"""

from __future__ import annotations

import sys
from bisect import bisect_left
from collections.abc import Iterable
from dataclasses import dataclass
from itertools import accumulate, islice, pairwise
from operator import eq


def decayed(samples: Iterable[tuple[float, float]], newest: float, half_life: float) -> list[tuple[float, float]]:
    """(value, weight) of each (time, value) sample, by age before `newest`."""
    return [(value, 0.5 ** ((newest - moment) / half_life)) for moment, value in samples]


def percentile(weighted: list[tuple[float, float]], share: float) -> float | None:
    """The smallest value whose cumulated weight reaches `share` of the total; None without samples."""
    if not weighted:
        return None
    ordered = sorted(weighted)
    total = sum(weight for _value, weight in ordered)
    # Summing floats in a fixed (sorted) order keeps the answer the same for the same samples.
    wanted = share * total
    running = 0.0
    for value, weight in ordered:
        running += weight
        if running >= wanted * (1 - 1e-12):
            return value
    return ordered[-1][0]


class Weights(dict[float, float]):
    """The decay weight of each window end, as `decayed` works it out, computed once per window."""

    def __init__(self, newest: float, half_life: float) -> None:
        super().__init__()
        self.newest, self.half_life = newest, half_life

    def __missing__(self, moment: float) -> float:
        weight = self[moment] = 0.5 ** ((self.newest - moment) / self.half_life)
        return weight


class Decay:
    """Weights for the windows of one history read. Windows read on the grid (`start`, `start + step`, ...,
    `newest`: every pod's, unless its series has gaps) take a slice of one precomputed list."""

    def __init__(self, newest: float, half_life: float, start: float | None = None, step: float = 0.0) -> None:
        self.weights = Weights(newest, half_life)
        self._grid: list[float] = []
        self._index: dict[float, int] = {}
        if start is not None and step > 0:
            self._grid = [start + i * step for i in range(round((newest - start) / step) + 1)]
            self._index = {moment: i for i, moment in enumerate(self._grid)}
        self._grid_weights = [self.weights[m] for m in self._grid]
        # Ascending weights let a series in grid order skip the sort by weight (see weighted_percentile).
        self._ascending = all(a <= b for a, b in pairwise(self._grid_weights))

    def series(self, windows: dict[float, float]) -> Series:
        """A pod's windows (window end -> value) with their weights."""
        count = len(windows)
        if count and self._grid:
            at = self._index.get(next(iter(windows)))
            # Its windows are the grid's from `at` on, in order (one pass, nothing built).
            if at is not None and at + count <= len(self._grid) and all(
                    map(eq, windows, islice(self._grid, at, at + count))):
                return Series(count, list(windows.values()), self._grid_weights[at:at + count], self._ascending,
                              self._grid[at], self._grid[at + count - 1])
        return Series(count, list(windows.values()), list(map(self.weights.__getitem__, windows)), False,
                      min(windows, default=0.0), max(windows, default=0.0))


@dataclass
class Series:
    """One pod's windows: how many, their values and weights (`ascending`: known to be in ascending order),
    and the first and last window end."""

    count: int
    values: list[float]
    weights: list[float]
    ascending: bool
    first: float
    last: float


# `sum` of floats adds them one after the other before Python 3.12 (since, it compensates the rounding).
_SUM_ADDS_IN_TURN = sys.version_info < (3, 12)


def weighted_percentile(values: list[float], weights: list[float], share: float,
                        ascending: bool = False) -> float | None:
    """`percentile(list(zip(values, weights)), share)`, bit for bit, without building the pairs.

    The pairs sort by value, then weight: a stable sort by value of a list already in weight order gives
    that order (`ascending` says the weights are; else they are put so first). The running sums are
    `accumulate`'s over the weights in that order, the total their `sum`, as `percentile` makes it (before
    Python 3.12 `sum` adds floats one after the other: the last running sum); the first running sum that
    reaches the threshold is found by bisection (running sums only grow)."""
    if not values:
        return None
    if not ascending:
        by_weight = sorted(range(len(weights)), key=weights.__getitem__)
        values = list(map(values.__getitem__, by_weight))
        weights = list(map(weights.__getitem__, by_weight))
    order = sorted(range(len(values)), key=values.__getitem__)
    running = list(accumulate(map(weights.__getitem__, order)))
    total = running[-1] if _SUM_ADDS_IN_TURN else sum(map(weights.__getitem__, order))
    at = bisect_left(running, share * total * (1 - 1e-12))
    return values[order[min(at, len(order) - 1)]]
