"""Who holds what: a gang's members in the cluster model, and the GPUs promised to unbound gangs.

Shared by admission (choosing a room for a new gang) and the controller (checking and re-planning),
so both count alike.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from policies.vocabulary.objects import PodView
from webhook.cluster.model import ClusterModel, pod_is_finished
from webhook.gangs.ledger import GangRecord, Records
from webhook.gangs.placement import holding_rooms
from webhook.gangs.rooms import Fit, Room, RoomId, best_fit, fit, free_gpus, per_snapshot
from webhook.gangs.spec import is_bound, is_gated, membership
from webhook.scheduling.predicates import node_affinity_matches, node_selector_matches

# A clique of thousands of nodes is checked on a sample: its nodes share the labels a gang selects on.
COMPATIBILITY_SAMPLE = 16


@dataclass
class GangPods:
    """The unfinished pods of one gang, as the model shows them."""

    size: int
    pods: list[dict[str, Any]] = field(default_factory=list)

    @property
    def bound(self) -> list[dict[str, Any]]:
        return [p for p in self.pods if is_bound(p)]

    @property
    def gated(self) -> list[dict[str, Any]]:
        return [p for p in self.pods if is_gated(p)]


@per_snapshot
def gang_pods(model: ClusterModel) -> dict[str, GangPods]:
    """namespace/gang -> its unfinished members (pods with the gang label and a valid gang size).
    Computed once per snapshot: callers must not change the answer."""
    out: dict[str, GangPods] = {}
    for pod in model.pods.values():
        if pod_is_finished(pod):
            continue
        member = membership(pod)
        if member is None:
            continue
        group = out.setdefault(member.key, GangPods(member.size))
        group.size = max(group.size, member.size)
        group.pods.append(pod)
    return out


def promised_gpus(
    records: Records,
    members: dict[str, GangPods],
    *,
    exclude: str,
    counts: Callable[[GangRecord], bool] = lambda _r: True,
) -> dict[RoomId, int]:
    """GPUs per room promised to other gangs for their members not bound yet (bound ones hold GPUs already)."""
    promised: dict[RoomId, int] = {}
    for key, record in records.items():
        if key == exclude or not record.promising or not counts(record):
            continue
        assert record.room is not None
        group = members.get(key)
        bound = len(group.bound) if group else 0
        waiting = max(0, record.size - bound)
        promised[record.room] = promised.get(record.room, 0) + waiting * record.gpus_per_pod
    return promised


def older_or_released(record: GangRecord) -> Callable[[GangRecord], bool]:
    """Promises that come before `record`'s: released gangs (their pods are being scheduled) and older gangs."""
    mine = (record.created_at, record.key)
    return lambda other: other.released_at is not None or (other.created_at, other.key) < mine


def compatible(room: Room, pod: dict[str, Any], model: ClusterModel) -> bool:
    """Some node of the room satisfies the pod's node selector and required node affinity."""
    for name in room.nodes[:COMPATIBILITY_SAMPLE]:
        labels = model.nodes[name].labels
        if node_selector_matches(pod, labels) and node_affinity_matches(pod, labels, name):
            return True
    return False


def candidate_rooms(model: ClusterModel, record: GangRecord, pod: dict[str, Any]) -> list[Room]:
    """Rooms of the gang's types that could ever hold it and that its members' constraints allow."""
    return [
        room
        for room in holding_rooms(model, list(record.types), record.size, record.gpus_per_pod)
        if compatible(room, pod, model)
    ]


def room_of_bound(model: ClusterModel, rooms: list[Room], group: GangPods | None) -> Room | None:
    """The room the gang's bound members are in (a replacement member joins them there)."""
    if group is None:
        return None
    nodes = {PodView(p).node_name for p in group.bound}
    for room in rooms:
        if nodes & set(room.nodes):
            return room
    return None


def choose_room(
    model: ClusterModel,
    record: GangRecord,
    pod: dict[str, Any],
    records: Records,
    members: dict[str, GangPods],
) -> tuple[Fit | None, list[Room]]:
    """The best-fit room for the gang's members not bound yet, every other promise counted as used."""
    rooms = candidate_rooms(model, record, pod)
    group = members.get(record.key)
    needed = record.size - (len(group.bound) if group else 0)
    free = free_gpus(model)
    promised = promised_gpus(records, members, exclude=record.key)
    joined = room_of_bound(model, rooms, group)
    if joined is not None:
        found = fit(joined, record.gpus_per_pod, needed, free, promised.get(joined.id, 0))
        return (found if found.fits else None), [joined]
    return best_fit(rooms, record.gpus_per_pod, needed, free, promised), rooms
