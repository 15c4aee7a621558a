"""Which pods differ between two snapshots, object by object (the store never changes an object in place): what
a count kept across snapshots reads again (webhook/placement/free_gpus.py, webhook/quotas/snapshot_picture.py)."""

from __future__ import annotations

from collections.abc import Mapping
from itertools import compress, count
from operator import is_not
from typing import NamedTuple


class PodList:
    """A snapshot's pods as two lists, keys and objects in the dict's order: compared position by position
    with the next snapshot's, the pods that stayed cost a pointer comparison each, not a hash lookup."""

    __slots__ = ("by_key", "keys", "objects")

    def __init__(self, pods: Mapping[str, object]) -> None:
        self.by_key = pods
        self.keys = list(pods)
        self.objects = list(pods.values())


class OrderedChanges(NamedTuple):
    """The pods that differ between two snapshots whose order is the store's: the kept pods in the same order,
    the new ones after them (`added` in their order)."""

    replaced: list[str]
    removed: list[str]
    added: list[str]


def changed_pods(before: PodList, now: PodList) -> set[str]:
    """The keys whose object is not the same in both: added, removed and replaced pods (any order; one that moved
    is compared key by key)."""
    if before.by_key is now.by_key:
        return set()
    found = ordered_changes(before, now)
    if found is None:  # the order moved (a relist): every key looked up
        return _changed_by_key(before.by_key, now.by_key)
    return {*found.replaced, *found.removed, *found.added}


def ordered_changes(before: PodList, now: PodList) -> OrderedChanges | None:
    """The changes, when `now`'s order is `before`'s less the pods removed, plus new ones at the end (the store
    keeps its pods in the order they were first stored; a replaced pod keeps its place); None for any other order
    (a relist, a pod removed and stored again), which only a lookup of every key can compare."""
    found = OrderedChanges([], [], [])
    if before.by_key is now.by_key:
        return found
    i = j = 0
    while True:
        # The next position where the two differ, scanned in C; each difference is then one step of a merge.
        left, right = iter(before.objects), iter(now.objects)
        left.__setstate__(i)  # type: ignore[attr-defined]
        right.__setstate__(j)  # type: ignore[attr-defined]
        skip = next(compress(count(), map(is_not, left, right)), None)
        if skip is None:
            break
        i, j = i + skip, j + skip
        old, new = before.keys[i], now.keys[j]
        if old == new:
            found.replaced.append(new)
            i, j = i + 1, j + 1
        elif old not in now.by_key:
            found.removed.append(old)
            i += 1
        else:  # a new pod before one kept, or the order moved
            return None
    common = min(len(before.keys) - i, len(now.keys) - j)
    # What is left over on either side was removed, or added at the end; one that is in both moved.
    gone, new_at_end = before.keys[i + common:], now.keys[j + common:]
    if any(key in now.by_key for key in gone) or any(key in before.by_key for key in new_at_end):
        return None
    found.removed.extend(gone)
    found.added.extend(new_at_end)
    return found


def _changed_by_key(before: Mapping[str, object], now: Mapping[str, object]) -> set[str]:
    keys = now.keys()
    # Keys and values of one dict iterate in the same order, so each key meets its own object.
    changed = set(compress(keys, map(is_not, map(before.get, keys), now.values())))
    changed.update(before.keys() - keys)
    return changed


__all__ = ["OrderedChanges", "PodList", "changed_pods", "ordered_changes"]
