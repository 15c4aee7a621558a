"""How KGWE's metrics are made: prometheus_client's own objects, or, in a one-shot command, ones that do nothing.

The modules a one-shot command imports (`kgwe review`, `kgwe explain`) make their module-level metrics with
`counter`, `gauge` and `histogram` rather than with prometheus_client's classes. Such a command calls
`unscraped()` before it imports the engines, and gets metrics that do nothing: it never imports
prometheus_client, whose package imports an HTTP server, a WSGI server, urllib and ssl for its exposition
(docs/performance.md, "The server's libraries, not loaded by a one-shot command"). Every other process, the
server among them, gets prometheus_client's own objects, made and registered on the default registry when their
module is imported, as before: a request counts straight into the real metric, with nothing in between.

This module defines no metric, so a command can call `unscraped()` before any metric is made.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    from prometheus_client import Counter, Gauge, Histogram

# Set by `unscraped()`: this process's metrics are never read.
_unscraped = False


def unscraped() -> None:
    """This process exits without its metrics ever being read (a one-shot command that owns its process):
    the metrics made from now on do nothing, and prometheus_client is not imported for them. Not for a
    process that serves, or that tests share: a metric made before the call stays a real one, and one made
    after it counts nothing."""
    global _unscraped
    _unscraped = True


class _Unread:
    """A metric no one reads: prometheus_client's operations that change a value (none that time or decorate),
    doing nothing."""

    __slots__ = ()

    def labels(self, *values: str, **named: str) -> _Unread:
        return self

    def inc(self, amount: float = 1) -> None:
        pass

    def dec(self, amount: float = 1) -> None:
        pass

    def set(self, value: float) -> None:
        pass

    def set_to_current_time(self) -> None:
        pass

    def observe(self, amount: float) -> None:
        pass

    def remove(self, *values: str) -> None:
        pass

    def clear(self) -> None:
        pass


class KeptChildren:
    """A labelled metric's children, kept by their label values: prometheus_client's `labels()` takes a lock and
    builds a key on every call, which a metric counted on every admission request pays for nothing."""

    __slots__ = ("_children", "_metric")

    def __init__(self, metric: Any) -> None:
        self._metric = metric
        self._children: dict[tuple[str, ...], Any] = {}

    def __call__(self, *values: str) -> Any:
        child = self._children.get(values)
        if child is None:
            child = self._children[values] = self._metric.labels(*values)
        return child


def counter(name: str, documentation: str, labelnames: Sequence[str] = (), **options: Any) -> Counter:
    """prometheus_client's Counter, or one that does nothing after `unscraped()`."""
    if _unscraped:
        return cast("Counter", _Unread())
    from prometheus_client import Counter

    return Counter(name, documentation, labelnames, **options)


def gauge(name: str, documentation: str, labelnames: Sequence[str] = (), **options: Any) -> Gauge:
    """prometheus_client's Gauge, or one that does nothing after `unscraped()`."""
    if _unscraped:
        return cast("Gauge", _Unread())
    from prometheus_client import Gauge

    return Gauge(name, documentation, labelnames, **options)


def histogram(name: str, documentation: str, labelnames: Sequence[str] = (), **options: Any) -> Histogram:
    """prometheus_client's Histogram, or one that does nothing after `unscraped()`."""
    if _unscraped:
        return cast("Histogram", _Unread())
    from prometheus_client import Histogram

    return Histogram(name, documentation, labelnames, **options)
