"""Rooms: the places a gang can be kept in one NVLink fabric, and what is free in them.

A room is either a multi-node NVLink clique (nodes with the same `kgwe.io/nvlink-clique` or
`nvidia.com/gpu.clique` label value) or one node's NVLink domain (the node's
`kgwe.io/nvlink-domain-size` GPUs, selected by `kubernetes.io/hostname`). A room is selected by one
label key and value, which is what the controller pins the gang's members to.

Free capacity is counted per node in whole pods of the gang (a pod runs on one node), from the node's
allocatable GPUs minus the GPUs of the unfinished pods bound to it. Capacity promised to other gangs
that are not bound yet counts as used, so two gangs never get the same room.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from webhook.cluster.model import ClusterModel
from webhook.cluster.node_facts import GPU_RESOURCE, NodeFacts
from webhook.gang_spec import HOSTNAME_LABEL

KIND_CLIQUE = "clique"
KIND_NODE = "node"


@dataclass(frozen=True)
class RoomId:
    """How a room is selected: nodes with `key` = `value`."""

    kind: str  # clique | node
    key: str
    value: str

    def as_json(self) -> dict[str, str]:
        return {"kind": self.kind, "key": self.key, "value": self.value}

    @classmethod
    def from_json(cls, raw: Any) -> RoomId | None:
        if not isinstance(raw, dict):
            return None
        kind, key, value = raw.get("kind"), raw.get("key"), raw.get("value")
        if kind not in (KIND_CLIQUE, KIND_NODE) or not isinstance(key, str) or not isinstance(value, str):
            return None
        return cls(kind, key, value)

    def __str__(self) -> str:
        return self.value if self.kind == KIND_CLIQUE else f"node {self.value}"


@dataclass
class Room:
    id: RoomId
    nodes: list[str] = field(default_factory=list)
    capacity: int = 0  # GPUs the room holds when empty (a node room: its NVLink domain)

    def slots(self, gpus_per_pod: int, free: dict[str, int]) -> int:
        """Pods of `gpus_per_pod` GPUs that fit on the room's nodes with `free` GPUs per node."""
        if gpus_per_pod <= 0:
            return 1 << 30
        if self.id.kind == KIND_NODE:
            return min(free.get(self.nodes[0], 0), self.capacity) // gpus_per_pod
        return sum(free.get(n, 0) // gpus_per_pod for n in self.nodes)

    def max_slots(self, gpus_per_pod: int, model: ClusterModel) -> int:
        """Pods of `gpus_per_pod` GPUs the room could ever hold (every GPU free)."""
        total = {n: node_gpus(model.nodes[n]) for n in self.nodes}
        return self.slots(gpus_per_pod, total)


def node_gpus(facts: NodeFacts) -> int:
    allocatable = facts.allocatable.get(GPU_RESOURCE)
    return int(allocatable) if allocatable is not None else facts.gpu_count


def rooms_for(model: ClusterModel, types: Iterable[str], *, node_rooms: bool) -> list[Room]:
    """The rooms of the given accelerator types, cliques first; with `node_rooms`, NVLink nodes outside cliques too."""
    cliques: dict[RoomId, Room] = {}
    nodes: list[Room] = []
    for type_id in types:
        summary = model.types.get(type_id)
        if summary is None:
            continue
        for name in summary.nodes:
            facts = model.nodes[name]
            if facts.clique and facts.clique_label:
                room_id = RoomId(KIND_CLIQUE, facts.clique_label, facts.clique)
                room = cliques.setdefault(room_id, Room(room_id))
                room.nodes.append(name)
                room.capacity += node_gpus(facts)
            elif node_rooms and facts.nvlink_domain_size >= 2:
                hostname = facts.labels.get(HOSTNAME_LABEL, name)
                capacity = min(facts.nvlink_domain_size, node_gpus(facts))
                nodes.append(Room(RoomId(KIND_NODE, HOSTNAME_LABEL, hostname), [name], capacity))
    return sorted(cliques.values(), key=lambda r: r.id.value) + sorted(nodes, key=lambda r: r.id.value)


T = TypeVar("T")


def per_snapshot(compute: Callable[[ClusterModel], T]) -> Callable[[ClusterModel], T]:
    """`compute` once per cluster snapshot: snapshots are immutable, and admissions and controller passes
    of one snapshot would otherwise each walk every pod. The last snapshot is held, so its id stays its own."""
    last: list[tuple[ClusterModel, T]] = []
    lock = threading.Lock()

    def cached(model: ClusterModel) -> T:
        with lock:
            if last and last[0][0] is model:
                return last[0][1]
        value = compute(model)
        with lock:
            last[:] = [(model, value)]
        return value

    return cached


@dataclass(frozen=True)
class Fit:
    room: Room
    slots: int  # pods of the gang's size that fit, after promises to others
    needed: int  # pods still to place

    @property
    def fits(self) -> bool:
        return self.slots >= self.needed

    def short_gpus(self, gpus_per_pod: int) -> int:
        return max(0, self.needed - self.slots) * gpus_per_pod


def fit(room: Room, gpus_per_pod: int, needed: int, free: dict[str, int], promised_gpus: int) -> Fit:
    """How the room holds `needed` more pods when `promised_gpus` of it are promised to other gangs."""
    slots = room.slots(gpus_per_pod, free)
    if gpus_per_pod > 0 and promised_gpus > 0:
        slots -= -(-promised_gpus // gpus_per_pod)  # promises are held in the gang's own pod size, rounded up
    return Fit(room, max(0, slots), needed)


def best_fit(
    rooms: list[Room], gpus_per_pod: int, needed: int, free: dict[str, int], promised: dict[RoomId, int]
) -> Fit | None:
    """The room that holds the gang with the least room left over (big rooms stay free for big gangs)."""
    best: tuple[tuple[int, int, str], Fit] | None = None
    for room in rooms:
        found = fit(room, gpus_per_pod, needed, free, promised.get(room.id, 0))
        if not found.fits:
            continue
        rank = (found.slots - needed, 0 if room.id.kind == KIND_NODE else 1, room.id.value)
        if best is None or rank < best[0]:
            best = (rank, found)
    return best[1] if best else None
