"""The pure part of a sized gang's placement plan (SPEC section 8), called from `build_plan`.

A member of a gang with `kgwe.io/gang-size` gets, at admission:
- the label `kgwe.io/gang` (how the controller finds the gang's pods);
- its types narrowed to those with a room that could ever hold the whole gang, and, where only
  multi-node cliques can, a required `Exists` on the clique label (never a specific clique: see
  docs/gangs.md, "Why the clique is pinned at ungate time");
- the scheduling gate `kgwe.io/gang`, so no member holds a GPU before the whole gang can start;
- where the Workload API is served (`native`, webhook/gangs/native.py), the PodGroup it joins
  (`spec.schedulingGroup.podGroupName`; KGWE creates the PodGroup when it releases the gang), unless the
  pod names one of its own;
- under Kueue (`kueue.x-k8s.io/queue-name`), no gate: Kueue's topology request for the clique level.
A gang no room could ever hold (N pods x GPUs per pod more than the largest clique) is refused.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from policies.vocabulary import keys
from policies.vocabulary.objects import PodView, pod_view
from webhook.cluster.model import ClusterModel
from webhook.gangs.native import pod_group_name
from webhook.gangs.rooms import KIND_CLIQUE, KIND_NODE, Room, rooms_for
from webhook.gangs.spec import GATE, HOSTNAME_LABEL, LABEL_GANG
from webhook.placement.constraints import Requirement

KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
KUEUE_REQUIRED_TOPOLOGY = "kueue.x-k8s.io/podset-required-topology"
PREFERRED_CLIQUE_KEY = keys.NVLINK_CLIQUE


class GangPlan(Protocol):
    """The fields of `webhook.placement.plan.PlacementPlan` this module writes."""

    types: list[str]
    labels: dict[str, str]
    annotations: dict[str, str]
    requirements: list[Requirement]
    scheduling_gates: list[str]
    scheduling_group: str | None
    refusals: list[str]
    steps: list[str]


def queued_by_kueue(pod: PodView | Mapping[str, Any]) -> bool:
    """Whether Kueue queues the pod (its queue-name label, or the annotation older Kueue read)."""
    view = pod_view(pod)
    return view.label(KUEUE_QUEUE_LABEL) is not None or view.annotation(KUEUE_QUEUE_LABEL) is not None


def holding_rooms(model: ClusterModel, types: list[str], size: int, gpus_per_pod: int) -> list[Room]:
    """The rooms of these types that could ever hold the whole gang (every GPU free)."""
    rooms = rooms_for(model, types, node_rooms=True)
    return [room for room in rooms if room.max_slots(gpus_per_pod, model) >= size]


def clique_key_of(rooms: list[Room]) -> str | None:
    """The one clique label every room uses, when only cliques hold the gang (then `Exists` on it is safe)."""
    if not rooms or any(room.id.kind == KIND_NODE for room in rooms):
        return None
    keys = {room.id.key for room in rooms}
    return keys.pop() if len(keys) == 1 else None


def plan_sized_gang(
    plan: GangPlan,
    pod: PodView | Mapping[str, Any],
    candidates: list[str],
    gang: str,
    size: int,
    gpus_per_pod: int,
    model: ClusterModel,
    *,
    native: bool = False,
) -> bool:
    """Write a sized gang's part of the plan; False (with a refusal) when no room could ever hold it. `native`:
    the Workload API is served, so a gated member joins the gang's PodGroup."""
    rooms = rooms_for(model, candidates, node_rooms=True)
    scope = "/".join(candidates) or "GPU"
    if not rooms:
        plan.refusals.append(
            f"kgwe.io/gang {gang}: a gang is kept in one NVLink clique or one node's NVLink domain, and no "
            f"{scope} node is in either"
        )
        return False
    holding = [room for room in rooms if room.max_slots(gpus_per_pod, model) >= size]
    if not holding:
        plan.refusals.append(_too_big(gang, size, gpus_per_pod, rooms))
        return False
    room_nodes = {n for room in holding for n in room.nodes}
    plan.types = [t for t in candidates if any(n in room_nodes for n in model.types[t].nodes)]
    plan.labels[LABEL_GANG] = gang
    clique_key = clique_key_of(holding)
    if clique_key is not None:
        plan.requirements.append(Requirement(clique_key, "Exists"))
    if queued_by_kueue(pod):
        # Kueue admits the whole workload into one topology domain itself; a KGWE gate would only delay it.
        plan.annotations[KUEUE_REQUIRED_TOPOLOGY] = clique_key or _kueue_level(holding)
    else:
        plan.scheduling_gates.append(GATE)
        if native and not pod_view(pod).pod_group_name:
            # Set at CREATE only (the field is immutable); the PodGroup may be created later, at the release.
            plan.scheduling_group = pod_group_name(gang)
    plan.steps.append("gang")
    return True


def _kueue_level(rooms: list[Room]) -> str:
    cliques = [room.id.key for room in rooms if room.id.kind == KIND_CLIQUE]
    if PREFERRED_CLIQUE_KEY in cliques:
        return PREFERRED_CLIQUE_KEY
    return cliques[0] if cliques else HOSTNAME_LABEL


def _too_big(gang: str, size: int, gpus_per_pod: int, rooms: list[Room]) -> str:
    asked = f"{size} pods x {gpus_per_pod} GPUs = {size * gpus_per_pod} GPUs"
    cliques = [room for room in rooms if room.id.kind == KIND_CLIQUE]
    nodes = [room for room in rooms if room.id.kind == KIND_NODE]
    parts = []
    if cliques:
        largest = max(cliques, key=lambda r: (r.capacity, r.id.value))
        parts.append(f"the largest NVLink clique, {largest.id.value}, has {largest.capacity} GPUs")
    if nodes:
        largest = max(nodes, key=lambda r: (r.capacity, r.id.value))
        parts.append(f"the largest single-node NVLink domain ({largest.id.value}) has {largest.capacity} GPUs")
    return f"kgwe.io/gang {gang}: {asked} in one NVLink fabric; no room could ever hold them: {'; '.join(parts)}"
