"""Where a gang's room is decided: the pods of `kgwe.io/gang` are co-located in one NVLink clique.

A sized gang (`kgwe.io/gang-size`) is planned by webhook/gangs/placement.py (rooms that could ever hold
it, the scheduling gate, Kueue's topology request). A gang without a size gets the gang label, a
required clique label and pod affinity on it, so its pods share whichever clique the first one lands in.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from policies.vocabulary import keys
from policies.vocabulary.objects import PodView
from policies.vocabulary.topology_schema import LABEL_NVLINK_CLIQUE
from webhook.cluster.model import ClusterModel
from webhook.gangs.native import native_gangs
from webhook.gangs.placement import KUEUE_REQUIRED_TOPOLOGY, plan_sized_gang, queued_by_kueue
from webhook.placement.constraints import Requirement
from webhook.placement.context import PlacementPlan, PlanContext, describe_cluster
from webhook.placement.trace import record, refusal_or


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
