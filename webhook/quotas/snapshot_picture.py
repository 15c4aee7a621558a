"""Admission's quota picture of a snapshot (`picture_of`), kept from the last snapshot asked (issue 36).

Admission (`would_wait`, `kgwe review`'s answer, the warning that a new pod will wait) and the quota views ask
the picture of whatever snapshot they hold. Computed afresh (`quota_picture`) it walks and charges every pod:
2.1-2.6 CPU-s per new snapshot at 3,000 nodes (45,000 pods), paid by the first admission of a quota tenant's
pod after any change, while snapshots are rebuilt up to twice a second.

Here a `QuotaIndex` (webhook/quotas/incremental.py, the controller's kept reads) is told which pods changed
by comparing the snapshot's pods with those of the last snapshot pictured, object by object (the store never
changes an object in place, so the same object is the same pod). That comparison, not the store's listener,
is what makes the answer exactly `quota_picture(model)` of any snapshot, older or newer than the last one:
a listener runs after its change is stored, so a snapshot may hold a change whose event has not arrived
yet (the controller tolerates that for one pass; admission's answer may not). The comparison walks the two
snapshots' pods in order in C (webhook/cluster/pod_changes.py), about ten milliseconds at 45,000 pods; only the
pods that differ are read again.
"""

from __future__ import annotations

import threading

from webhook.cluster.model import ClusterModel
from webhook.cluster.pod_changes import PodList, changed_pods
from webhook.placement.rooms import per_snapshot
from webhook.quotas.incremental import Pending, QuotaIndex
from webhook.quotas.waiters import QuotaPicture


class SnapshotPictures:
    """`quota_picture` of any snapshot with nothing in flight, reading again only the pods that differ from
    the last snapshot pictured. Safe from any thread: one picture at a time."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._index = QuotaIndex()
        self._pods: PodList | None = None  # the pods the index's reads are of

    def picture(self, model: ClusterModel) -> QuotaPicture:
        with self._lock:
            before, self._pods = self._pods, None  # a picture that fails leaves every pod to read again
            now = PodList(model.pods)
            pending = Pending(frozenset(changed_pods(before, now)) if before is not None else frozenset(),
                              before is None)
            kept = self._index.picture(model, pending, {})
            self._pods = now
            # Without the reads: they are the index's own, and move with its next picture (a copy of every pod's
            # costs a third of the picture; no reader of a snapshot's picture asks them).
            return QuotaPicture(kept.tenants, kept.unlimited)


_PICTURES = SnapshotPictures()


@per_snapshot
def picture_of(model: ClusterModel) -> QuotaPicture:
    """`quota_picture(model)` with nothing in flight, once per snapshot: admissions of one snapshot share it
    (callers must not change the answer)."""
    return _PICTURES.picture(model)


__all__ = ["SnapshotPictures", "picture_of"]
