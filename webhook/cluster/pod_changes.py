"""Which pods differ between two snapshots, object by object (the store never changes an object in place): what
a count kept across snapshots reads again (webhook/placement/free_gpus.py, webhook/quotas/snapshot_picture.py)."""

from __future__ import annotations

from collections.abc import Mapping
from itertools import compress, count
from operator import is_not


class PodList:
    """A snapshot's pods as two lists, keys and objects in the dict's order: compared position by position
    with the next snapshot's, the pods that stayed cost a pointer comparison each, not a hash lookup."""

    __slots__ = ("by_key", "keys", "objects")

    def __init__(self, pods: Mapping[str, object]) -> None:
        self.by_key = pods
        self.keys = list(pods)
        self.objects = list(pods.values())


def changed_pods(before: PodList, now: PodList) -> set[str]:
    """The keys whose object is not the same in both: added, removed and replaced pods (the store keeps its
    pods in the order they were first stored, so a snapshot's order is the last one's less the pods removed,
    plus the new ones at the end; any other order is compared key by key)."""
    if before.by_key is now.by_key:
        return set()
    changed: set[str] = set()
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
        if old == new:  # replaced
            changed.add(new)
            i, j = i + 1, j + 1
        elif old not in now.by_key:  # removed
            changed.add(old)
            i += 1
        elif new not in before.by_key:  # added
            changed.add(new)
            j += 1
        else:  # the order moved (a relist): every key looked up
            return _changed_by_key(before.by_key, now.by_key)
    common = min(len(before.keys) - i, len(now.keys) - j)
    # What is left over on either side was removed, or added at the end (one that is in both is read again).
    changed.update(before.keys[i + common:])
    changed.update(now.keys[j + common:])
    return changed


def _changed_by_key(before: Mapping[str, object], now: Mapping[str, object]) -> set[str]:
    keys = now.keys()
    # Keys and values of one dict iterate in the same order, so each key meets its own object.
    changed = set(compress(keys, map(is_not, map(before.get, keys), now.values())))
    changed.update(before.keys() - keys)
    return changed


__all__ = ["PodList", "changed_pods"]
