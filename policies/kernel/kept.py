"""A bounded map of conclusions kept between calls, shared by threads: the one least recently used goes first."""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")


class Kept(Generic[K, V]):
    """At most `size` entries; `get` and `put` are safe from any thread."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._known: OrderedDict[K, V] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: K) -> V | None:
        with self._lock:
            known = self._known.get(key)
            if known is not None:
                self._known.move_to_end(key)
            return known

    def put(self, key: K, value: V) -> None:
        with self._lock:
            self._known[key] = value
            self._known.move_to_end(key)
            while len(self._known) > self._size:
                self._known.popitem(last=False)
