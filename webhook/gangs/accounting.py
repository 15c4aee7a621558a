"""Who holds what: a gang's members in the cluster model, and the GPUs promised to unbound gangs.

Shared by admission (choosing a room for a new gang) and the controller (checking and re-planning),
so both count alike.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import orjson

from policies.vocabulary.objects import PodView
from webhook.cluster.model import ClusterModel
from webhook.gang_spec import is_gated
from webhook.gangs.ledger import GangRecord, Records
from webhook.gangs.members import GangPods as GangPods  # re-exported: who is a member lives with its kept state
from webhook.gangs.members import gang_pods as gang_pods
from webhook.gangs.plan import holding_rooms
from webhook.placement.free_gpus import free_gpus
from webhook.placement.rooms import Fit, Room, RoomId, best_fit, fit
from webhook.scheduling.predicates import node_affinity_matches, node_selector_matches

# A clique of thousands of nodes is checked on a sample: its nodes share the labels a gang selects on.
COMPATIBILITY_SAMPLE = 16


def promised_gpus(
    records: Records,
    members: dict[str, GangPods],
    *,
    exclude: str,
    counts: Callable[[GangRecord], bool] = lambda _r: True,
) -> dict[RoomId, int]:
    """GPUs per room promised to other gangs for their members not bound yet (bound ones hold GPUs already).

    A waiting gang holds room for all its members not bound (some may not exist yet); a released one only
    for its live members not bound: all existed at the release, and one that finished or was deleted since
    will never be placed."""
    promised: dict[RoomId, int] = {}
    for key, record in records.items():
        if key == exclude or not record.promising or not counts(record):
            continue
        assert record.room is not None
        group = members.get(key)
        if record.released_at is not None:
            waiting = len(group.unbound) if group else 0
        else:
            waiting = max(0, record.size - (len(group.bound) if group else 0))
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


def constraint_signature(pod: dict[str, Any]) -> bytes:
    """The pod's node constraints (`spec.nodeSelector`, `spec.affinity.nodeAffinity`) as JSON bytes: all that
    `compatible` reads of a pod, so pods with equal signatures are compatible with the same rooms."""
    spec = PodView(pod).spec
    affinity = spec.get("affinity") if isinstance(spec.get("affinity"), dict) else {}
    return orjson.dumps([spec.get("nodeSelector"), (affinity or {}).get("nodeAffinity")], option=orjson.OPT_SORT_KEYS)


def distinct_constraints(pods: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """One pod per distinct node constraint (`spec.nodeSelector`, required node affinity) among `pods`.

    Members of one gang usually share a template, so this is one pod; a member with constraints of its own (its
    creator's nodeSelector) is kept, so every room is checked against it too."""
    seen: set[bytes] = set()
    out: list[dict[str, Any]] = []
    for pod in pods:
        signature = constraint_signature(pod)
        if signature not in seen:
            seen.add(signature)
            out.append(pod)
    return out


def candidate_rooms(model: ClusterModel, record: GangRecord, pods: Iterable[dict[str, Any]]) -> list[Room]:
    """Rooms of the gang's types that could ever hold it and that the constraints of every one of `pods` (its
    members) allow: a room one member cannot run in would start the others without it, a partial gang."""
    kinds = distinct_constraints(pods)
    return [
        room
        for room in holding_rooms(model, list(record.types), record.size, record.gpus_per_pod)
        if all(compatible(room, pod, model) for pod in kinds)
    ]


def room_of_bound(model: ClusterModel, rooms: list[Room], group: GangPods | None) -> Room | None:
    """The room the gang's placed members are in: bound on its nodes, or ungated and pinned to it (a release
    that lost a member half way). A replacement member joins them there, so one gang never spans two rooms."""
    if group is None:
        return None
    nodes = {PodView(p).node_name for p in group.bound}
    pinned = {
        (key, value)
        for p in group.unbound
        if not is_gated(p)
        for key, value in PodView(p).node_selector.items()
    }
    for room in rooms:
        if nodes & set(room.nodes) or (room.id.key, room.id.value) in pinned:
            return room
    return None


def choose_room(
    model: ClusterModel,
    record: GangRecord,
    pod: dict[str, Any],
    records: Records,
    members: dict[str, GangPods],
) -> tuple[Fit | None, list[Room]]:
    """The best-fit room for the gang's members not bound yet, every other promise counted as used; the room
    must suit `pod` (the member being admitted, or one of the gang) and every live member."""
    group = members.get(record.key)
    rooms = candidate_rooms(model, record, [pod, *(group.pods if group else [])])
    needed = record.size - (len(group.bound) if group else 0)
    free = free_gpus(model)
    promised = promised_gpus(records, members, exclude=record.key)
    joined = room_of_bound(model, rooms, group)
    if joined is not None:
        found = fit(joined, record.gpus_per_pod, needed, free, promised.get(joined.id, 0))
        return (found if found.fits else None), [joined]
    return best_fit(rooms, record.gpus_per_pod, needed, free, promised), rooms
