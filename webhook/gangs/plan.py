"""The gang step of the placement plan (`gang` in webhook/placement/plan.py `PLAN_STEPS`): the pods of
`kgwe.io/gang` are co-located in one NVLink clique (SPEC section 8).

A gang without a size gets the gang label, a required clique label and pod affinity on it, so its pods
share whichever clique the first one lands in. A member of a gang with `kgwe.io/gang-size` gets, at
admission:
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
from policies.vocabulary.topology_schema import LABEL_NVLINK_CLIQUE
from webhook.cluster.model import ClusterModel
from webhook.gang_spec import GATE, HOSTNAME_LABEL, LABEL_GANG
from webhook.gangs.native import native_gangs, pod_group_name
from webhook.placement.constraints import Requirement
from webhook.placement.context import PlacementPlan, PlanContext, describe_cluster
from webhook.placement.kueue import KUEUE_REQUIRED_TOPOLOGY, queued_by_kueue
from webhook.placement.rooms import KIND_CLIQUE, KIND_NODE, Room, rooms_for
from webhook.placement.trace import record, refusal_or

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


def gang(ctx: PlanContext) -> bool:
    """The gang step: keep the types with a clique (or room) that can hold the pod's gang."""
    name = ctx.gang
    if not name:
        return True
    plan = ctx.plan
    if ctx.intent.gang_size is not None:
        if not plan_sized_gang(
            plan, ctx.pod, ctx.candidates, name, ctx.intent.gang_size, ctx.demand.whole_gpus, ctx.model,
            native=native_gangs(ctx.model, ctx.config.gangs),
        ):
            record(plan, "gang", [], refusal_or(plan, "no NVLink clique has room for the gang"))
            return False
    elif not plan_unsized_gang(plan, ctx.pod, ctx.candidates, name, ctx.model):
        record(plan, "gang", [], refusal_or(plan, "no node of this type is in a multi-node NVLink clique"))
        return False
    ctx.candidates = plan.types
    record(plan, "gang", ctx.candidates, "no node of this type is in an NVLink clique with room for the gang")
    return True


def plan_unsized_gang(
    plan: PlacementPlan, pod: PodView | Mapping[str, Any], candidates: list[str], name: str, model: ClusterModel
) -> bool:
    """A gang without a size: one multi-node NVLink clique by pod affinity; False (with a refusal) when no
    candidate type has one."""
    with_cliques = [t for t in candidates if model.types[t].cliques]
    if not with_cliques:
        plan.refusals.append(
            f"kgwe.io/gang {name}: gangs are kept in one multi-node NVLink clique, and no "
            f"{'/'.join(candidates) or 'GPU'} node is in one; this cluster has {describe_cluster(model)}"
        )
        return False
    label_keys = set().union(*(model.types[t].clique_labels for t in with_cliques))
    clique_key = LABEL_NVLINK_CLIQUE if LABEL_NVLINK_CLIQUE in label_keys else keys.NVIDIA_GPU_CLIQUE
    plan.types = with_cliques
    plan.labels["kgwe.io/gang"] = name
    plan.requirements.append(Requirement(clique_key, "Exists"))
    plan.pod_affinity_terms.append(
        {"labelSelector": {"matchLabels": {"kgwe.io/gang": name}}, "topologyKey": clique_key}
    )
    if queued_by_kueue(pod):
        plan.annotations[KUEUE_REQUIRED_TOPOLOGY] = clique_key
    plan.steps.append("gang")
    return True


# What the assembly registers in `webhook.placement.plan.PLAN_STEPS`.
PLAN_STEPS = {"gang": gang}
