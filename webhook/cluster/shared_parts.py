"""Equal parts of the pods the store keeps, held once (issue 36: one worker's memory at 150,000 pods).

A slimmed pod is a dozen small dicts and lists and twenty strings, 3.5 KB, most of them equal to another pod's:
the replicas of a workload share their containers' resources, tolerations, labels and owner, a node's pods its
name, a namespace's pods its name. `SharedParts` hands back, for a part equal to one it kept, the kept one, so
150,000 pods hold a few thousand copies of each part instead of 150,000.

This is safe because nothing changes a stored object in place (the store's rule, which the per-pod memos already
rely on: webhook/cluster/model.py): a change is a new object from the watch. Parts are kept per place in the pod
(`path`), so one pod never holds the same object in two places (a `copy.deepcopy` of a stored pod that changes its
copy's limits must not change its requests). Equal means the same JSON (orjson keeps key order, tells 1 from 1.0
and from true), so a kept part is indistinguishable from the one it replaces in every answer.
"""

from __future__ import annotations

import sys
from decimal import Decimal
from typing import Any, TypeVar, overload

import orjson

# Parts kept at most; past it the table starts again (a cluster whose parts never repeat gains nothing and
# should not pay more than this many keys: about 10 MB of text).
MAX_KEPT = 65_536
# What JSON does not have (a date, a subclass of str or dict) is refused, not written as a string, so that the
# copy read back from the JSON is what it replaces (the API source's parts are decoded JSON: never refused).
NOT_JSON_REFUSED = orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_PASSTHROUGH_SUBCLASS


class SharedParts:
    """The kept parts, keyed by place and JSON. Any thread: a race only keeps one of two equal parts."""

    def __init__(self, max_kept: int = MAX_KEPT) -> None:
        self.max_kept = max_kept
        self._kept: dict[tuple[str, str], Any] = {}

    def __len__(self) -> int:
        return len(self._kept)

    def part(self, path: str, value: Any) -> Any:
        """The kept part equal to `value` at `path`; the first time, a copy of it read from its JSON, kept from now
        on (not `value` itself: whoever made `value` may still hold it, and change it)."""
        try:
            # As text: orjson's bytes keep the 4 KiB buffer they were written in (400 MB for 100,000 small keys).
            key = (path, orjson.dumps(value, option=NOT_JSON_REFUSED).decode())
        except TypeError:  # not JSON (a YAML date, an int past 64 bits): kept as it is
            return value
        kept = self._kept.get(key)
        if kept is not None:
            return kept
        if len(self._kept) >= self.max_kept:
            self._kept = {}
        kept = self._kept[key] = orjson.loads(key[1])
        return kept

    def changed(self) -> list[str]:
        """The places of kept parts that no longer read as the JSON they were kept under: something changed a
        stored object in place, and with it every pod that shares the part (the test suite asks after each
        module, docs/decisions.md)."""
        return [path for (path, text), part in list(self._kept.items())
                if orjson.dumps(part, option=NOT_JSON_REFUSED).decode() != text]


# Amounts and type lists kept at most (a few dozen repeat: 1 GPU, 8 GPUs' memory, a type's price per hour).
MAX_VALUES = 4096
_AMOUNTS: dict[str, Decimal] = {}
_CONSTANTS: dict[str, Any] = {}
H = TypeVar("H")


@overload
def amount(value: Decimal) -> Decimal: ...
@overload
def amount(value: None) -> None: ...
@overload
def amount(value: Decimal | None) -> Decimal | None: ...


def amount(value: Decimal | None) -> Decimal | None:
    """An amount that repeats across pods' charges, costs and rates held once: a Decimal is 104 bytes, and
    150,000 pods' records held 800,000 of them. Equal by its text, so 1 and 1.0 stay apart (they print apart)."""
    return value if value is None else _held_once(_AMOUNTS, str(value), value)


def constant(value: H) -> H:
    """A tuple of names and amounts that repeats across pods (a pending pod's candidate types, a pod's GPU
    containers' parts) held once; equal by its repr, so amounts stay apart as `amount` keeps them."""
    return _held_once(_CONSTANTS, repr(value), value)


def _held_once(table: dict[str, Any], key: str, value: H) -> H:
    """The value `table` keeps under `key`, `value` the first time (the table starts again past MAX_VALUES)."""
    kept = table.get(key)
    if kept is None:
        if len(table) >= MAX_VALUES:
            table.clear()
        kept = table[key] = value
    return kept  # type: ignore[no-any-return]


def text(value: Any) -> Any:
    """A string that repeats across pods (a namespace, a node's name, a timestamp) held once."""
    return sys.intern(value) if type(value) is str else value


SHARED = SharedParts()
