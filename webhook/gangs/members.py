"""A gang's live members in a snapshot (`gang_pods`), kept across snapshots and moved by the pods that changed.

Admission and the gang controller ask it once per snapshot, and every admitted pod makes a new one: a walk of every
pod each time was 16-19 % of the GIL during admission at 10,000 nodes. The answer is the walk's exactly, order
included (gangs in the order of their first member, members in the store's order: the release order and the
records kept depend on it), for any snapshot, older or newer (tests/gangs/test_kept_members.py compares the two after
every random change). The store keeps pods in the order they were first stored, so each member is given a sequence
number when first seen; a change that number cannot place (a pod that becomes a member in place, a relist that
moved the order) is answered by the full walk, which numbers them again.
"""

from __future__ import annotations

import threading
from bisect import bisect_left
from dataclasses import dataclass, field
from typing import Any

from webhook.cluster.model import ClusterModel, pod_is_finished
from webhook.cluster.pod_changes import OrderedChanges, PodList, ordered_changes
from webhook.gang_spec import Membership, is_bound, is_gated, is_terminating, membership
from webhook.placement.rooms import per_snapshot


@dataclass
class GangPods:
    """The live members of one gang, as the model shows them: pods neither finished nor terminating.
    `size` is the largest `kgwe.io/gang-size` among them (a gang is whole only when every claim is met)."""

    size: int
    pods: list[dict[str, Any]] = field(default_factory=list)

    @property
    def bound(self) -> list[dict[str, Any]]:
        return [p for p in self.pods if is_bound(p)]

    @property
    def gated(self) -> list[dict[str, Any]]:
        return [p for p in self.pods if is_gated(p)]

    @property
    def unbound(self) -> list[dict[str, Any]]:
        return [p for p in self.pods if not is_bound(p)]


def live_membership(pod: object) -> Membership | None:
    """The gang `pod` is a live member of, or None.

    A finished pod (Succeeded, Failed: a Job keeps them) and a terminating one (deletionTimestamp set: a job
    restarted under the same name deletes its old pods, which run on through their grace period) are never
    members: counted, they would complete a new run of the gang that has only some of its pods, and hold room
    for pods that will never be placed. A terminating pod still holds its GPUs (`free_gpus`)."""
    if not isinstance(pod, dict) or pod_is_finished(pod) or is_terminating(pod):
        return None
    return membership(pod)


# A member as kept: its sequence number (its place in the store's order), the pod, its claimed gang size.
_Entry = tuple[int, dict[str, Any], int]


def _group(entries: list[_Entry]) -> GangPods:
    return GangPods(max(size for _seq, _pod, size in entries), [pod for _seq, pod, _size in entries])


class KeptGangPods:
    """The members of every gang, moved by the pods that changed since the last snapshot asked. Safe from any
    thread. An answer handed out is never changed: a gang that moves is a new `GangPods` in a new dict."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pods: PodList | None = None  # the snapshot's pods the rest describes
        self._entries: dict[str, list[_Entry]] = {}  # gang -> its members, by sequence number
        self._where: dict[str, tuple[str, int]] = {}  # a member's pod key -> its gang and sequence number
        self._next = 0
        self._answer: dict[str, GangPods] = {}

    def members(self, model: ClusterModel) -> dict[str, GangPods]:
        with self._lock:
            before, self._pods = self._pods, None  # a move that fails is made again from every pod
            now = PodList(model.pods)
            changes = ordered_changes(before, now) if before is not None else None
            if before is None or changes is None or not self._move(before, now, changes):
                self._walk(now)
            self._pods = now
            return self._answer

    def _walk(self, now: PodList) -> None:
        entries: dict[str, list[_Entry]] = {}
        where: dict[str, tuple[str, int]] = {}
        for seq, (key, pod) in enumerate(zip(now.keys, now.objects, strict=True)):
            member = live_membership(pod)
            if member is not None:
                entries.setdefault(member.key, []).append((seq, pod, member.size))  # type: ignore[arg-type]
                where[key] = (member.key, seq)
        self._entries, self._where, self._next = entries, where, len(now.keys)
        self._answer = {gang: _group(kept) for gang, kept in entries.items()}

    def _move(self, before: PodList, now: PodList, changes: OrderedChanges) -> bool:
        """Move the members by `changes`; False when one cannot be placed exactly (the state is then the walk's to
        make again)."""
        touched: set[str] = set()
        first_left = False  # a gang's first member left (or all did): the gangs' order may move
        for key in (*changes.replaced, *changes.removed):
            new = now.by_key.get(key)
            member = live_membership(new)
            was = self._where.get(key)
            if was is None:
                if member is not None:  # a member in place: its place among the members is not known
                    return False
                continue
            gang, seq = was
            kept = self._entries[gang]
            at = bisect_left(kept, seq, key=lambda entry: entry[0])
            if member is not None and member.key == gang:
                kept[at] = (seq, new, member.size)  # type: ignore[assignment]
            elif member is not None:  # into another gang in place
                return False
            else:
                del kept[at]
                del self._where[key]
                if not kept:
                    del self._entries[gang]
                first_left = first_left or at == 0
            touched.add(gang)
        for key in changes.added:
            seq, self._next = self._next, self._next + 1
            pod = now.by_key[key]
            member = live_membership(pod)
            if member is not None:
                self._entries.setdefault(member.key, []).append((seq, pod, member.size))  # type: ignore[arg-type]
                self._where[key] = (member.key, seq)
                touched.add(member.key)
        if touched:
            self._answer = self._answer_after(touched, first_left)
        return True

    def _answer_after(self, touched: set[str], first_left: bool) -> dict[str, GangPods]:
        entries = self._entries
        out: dict[str, GangPods] = {}
        for gang, group in self._answer.items():
            if gang not in touched:
                out[gang] = group
            elif gang in entries:
                out[gang] = _group(entries[gang])
        # A new gang's first member is a new pod, after every pod kept: its gang comes after the others.
        new = sorted((g for g in touched if g not in out and g in entries), key=self._first)
        out.update((gang, _group(entries[gang])) for gang in new)
        if first_left:
            out = dict(sorted(out.items(), key=lambda item: self._first(item[0])))
        return out

    def _first(self, gang: str) -> int:
        return self._entries[gang][0][0]


_KEPT = KeptGangPods()


@per_snapshot
def gang_pods(model: ClusterModel) -> dict[str, GangPods]:
    """namespace/gang -> its live members (pods with the gang label and a valid gang size, `live_membership`), in
    the order of their first member, each gang's in the store's order. Callers must not change the answer."""
    return _KEPT.members(model)


__all__ = ["GangPods", "KeptGangPods", "gang_pods", "live_membership"]
