"""The stretch of time a cost view covers, and its buckets (pure: numbers and text).

A window is `[start, end)` in unix seconds. A view over `--window 30d` ends at the last whole step before
now (so the same question asked twice in one step gets the same answer, and Prometheus' subquery grid
lines up with it); the month of a budget runs from the first of the month 00:00 UTC to the first of the next.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import UTC, datetime

_DURATION = re.compile(r"(\d+)(m|h|d|w)")
_UNIT = {"m": 60, "h": 3600, "d": 86400, "w": 604800}
HOUR = 3600
DAY = 86400
# The longest window asked of Prometheus in one subquery (its default retention is 15 days; ours say 90).
MAX_WINDOW_SECONDS = 400 * DAY


class WindowError(ValueError):
    """A window that is not a duration like 30d, 12h, 2w or 90m."""


def parse_window(text: str) -> int:
    """Whole seconds of `30d`, `12h`, `2w`, `90m`, `1d12h` (Prometheus' units from minutes to weeks)."""
    raw = text.strip()
    parts = _DURATION.findall(raw)
    if not raw or "".join(n + u for n, u in parts) != raw:
        raise WindowError(f"window {text!r}: write a duration such as 30d, 12h, 2w or 90m")
    seconds = sum(int(n) * _UNIT[u] for n, u in parts)
    if seconds <= 0 or seconds > MAX_WINDOW_SECONDS:
        raise WindowError(f"window {text!r}: must be longer than 0 and at most {MAX_WINDOW_SECONDS // DAY}d")
    return seconds


@dataclass(frozen=True)
class Window:
    start: float
    end: float
    label: str  # how it was asked: "30d", or "month" for a budget's month so far

    @property
    def seconds(self) -> float:
        return self.end - self.start

    @classmethod
    def ending(cls, now: float, seconds: int, step: float, label: str) -> Window:
        end = math.floor(now / step) * step
        return cls(end - seconds, end, label)

    @property
    def bucket_seconds(self) -> int:
        return HOUR if self.seconds <= 2 * DAY else DAY

    def buckets(self) -> list[tuple[float, float]]:
        """The stretches of the spend-over-time chart: hours for windows up to two days, else days, counted
        back from the window's end; the first is shorter when the window is not a whole number of them, so
        the buckets add up to the window exactly."""
        size = self.bucket_seconds
        out: list[tuple[float, float]] = []
        edge = self.end
        while edge > self.start:
            out.append((max(self.start, edge - size), edge))
            edge -= size
        return out[::-1]


def month_of(now: float) -> tuple[float, float]:
    """(first of the month 00:00 UTC, first of the next month) around `now`."""
    moment = datetime.fromtimestamp(now, UTC)
    start = datetime(moment.year, moment.month, 1, tzinfo=UTC)
    nxt = datetime(moment.year + (moment.month == 12), moment.month % 12 + 1, 1, tzinfo=UTC)
    return start.timestamp(), nxt.timestamp()


def stamp(moment: float) -> str:
    """RFC 3339 in UTC to the second."""
    return datetime.fromtimestamp(moment, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_stamp(text: object) -> float | None:
    """Unix seconds of an RFC 3339 time as the API writes them; None when absent or unreadable."""
    if not isinstance(text, str) or not text:
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None
