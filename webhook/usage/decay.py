"""Decaying histograms of per-window values (pure), as VPA and Autopilot keep them.

A window's weight halves with every half-life of age, age counted back from the newest window of the
history (not from the clock), so the same history gives the same answer whenever it is read. The
histogram is exact (each window its own bucket, sorted by value): a percentile is the smallest value
whose cumulated weight reaches the share asked, so it is always a value that was seen.
"""

from __future__ import annotations

from collections.abc import Iterable


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
