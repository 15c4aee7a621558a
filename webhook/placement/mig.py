"""Where MIG slices are chosen: the profile (the one asked for, else the smallest that fits the memory
asked and has a slice free now, webhook/placement/mig_free.py), the strategy the nodes expose it by
(mixed, single, GKE, or DRA), and how the pod asks for it.

On device-plugin nodes the pod's `nvidia.com/gpu` becomes `nvidia.com/mig-<profile>` (mixed) or the
node is selected by its product label (single) or GKE partition label; on DRA nodes the claim lists every
fitting profile, smallest first (webhook/dra/plan.py `plan_dra_mig`).
"""

from __future__ import annotations

from decimal import Decimal

from policies.gpu_demand import GpuDemand, mig_compute_slices
from policies.vocabulary import keys, resources
from policies.vocabulary.accelerator_types import MigProfile
from policies.vocabulary.objects import PodView
from policies.vocabulary.quantities import GIB
from webhook.cluster.model import ClusterModel
from webhook.intent import PodIntent
from webhook.placement.constraints import Requirement
from webhook.placement.context import PlacementPlan, PlanContext, describe_cluster, format_bytes
from webhook.placement.dra_planner import DRA_PLANNER
from webhook.placement.mig_free import has_free
from webhook.placement.trace import record, refusal_or

# The order a pod's strategy is chosen in when several offer its profile: named resources (mixed) before
# the product label (single) before GKE's partition label.
STRATEGY_ORDER = ("mixed", "single", "gke")
# MIG manager states in which a node's slices are not (yet, or any more) usable.
UNSETTLED_STATES = ("pending", "rebooting", "failed")


def mig(ctx: PlanContext) -> bool:
    """The MIG step: for a pod that shares by MIG, keep the types offering the chosen slice."""
    if ctx.sharing != "mig":
        return True
    plan = ctx.plan
    planner = DRA_PLANNER.value.plan_dra_mig if plan.backend == "dra" else plan_mig
    if not planner(plan, ctx.pod, ctx.demand, ctx.candidates, ctx.mig_profile, ctx.intent, ctx.model):
        record(plan, "mig", [], refusal_or(plan, "no MIG slice fits"))
        return False
    record(plan, "mig", plan.types, f"no node offers MIG {plan.mig_profile} ({plan.mig_strategy} strategy)")
    ctx.candidates = plan.types
    return True


def profile_gb(profile: str) -> int | None:
    """The memory of a MIG profile from its name (`3g.40gb` -> 40), for profiles the table lacks."""
    try:
        return int(profile.split("+")[0].split(".")[-1].removesuffix("gb"))
    except ValueError:
        return None


def fitting_in_order(
    offers: list[tuple[str, str, MigProfile | None]], memory_bytes: Decimal | None
) -> list[str]:
    """The MIG profiles that fit the memory asked, smallest (memory, then compute) first."""
    ranks: dict[str, tuple[int, int]] = {}
    for _type_id, profile, info in offers:
        memory_gb = info.memory_gb if info else profile_gb(profile)
        if memory_gb is None:
            continue
        if memory_bytes is not None and Decimal(memory_gb) * GIB < memory_bytes:
            continue
        compute = info.compute_slices if info else mig_compute_slices(profile)
        ranks[profile] = min(ranks.get(profile, (memory_gb, compute)), (memory_gb, compute))
    return sorted(ranks, key=lambda p: (ranks[p], p))


def first_free(
    fitting: list[str], offers: list[tuple[str, str, MigProfile | None, str]], demand: GpuDemand,
    model: ClusterModel,
) -> str:
    """The smallest fitting profile with a free slice now on a node offering it (allocatable minus bound
    pods), else the smallest: asking for a profile whose every slice is taken while a larger one is free
    would keep the pod Pending until a slice frees, however long that is."""
    for profile in fitting:
        nodes = [n for t, p, _i, _s in offers if p == profile for n in model.types[t].mig[profile].nodes]
        if has_free(model, nodes, profile, demand.whole_gpus + demand.mig.get(profile, 0)):
            return profile
    return fitting[0]


def mig_demand(demand: GpuDemand, plan: PlacementPlan) -> GpuDemand:
    """The pod's demand once its whole GPUs are MIG slices of the chosen profile."""
    mig = dict(demand.mig)
    if plan.mig_profile and demand.whole_gpus:
        mig[plan.mig_profile] = mig.get(plan.mig_profile, 0) + demand.whole_gpus
    return GpuDemand(whole_gpus=0, mig=mig)


def plan_mig(
    plan: PlacementPlan,
    pod: PodView,
    demand: GpuDemand,
    candidates: list[str],
    wanted_profile: str | None,
    intent: PodIntent,
    model: ClusterModel,
) -> bool:
    """MIG on device-plugin nodes: one profile and one strategy; False (with a refusal) when none fits."""
    offers: list[tuple[str, str, MigProfile | None, str]] = []
    through_dra = False
    for type_id in candidates:
        accel = model.table.get(type_id)
        for profile, offer in model.types[type_id].mig.items():
            for strategy in offer.strategies:
                # DRA-published slices are planned by plan_dra_mig; a device-plugin pod cannot use them.
                if strategy in STRATEGY_ORDER:
                    offers.append((type_id, profile, accel.mig_profile(profile) if accel else None, strategy))
                else:
                    through_dra = True
    if not offers:
        scope = "/".join(candidates) if candidates else "GPU"
        if through_dra:
            # Key words first: warnings are cut at 120 characters.
            plan.refusals.append("MIG slices here are DRA devices: ask for nvidia.com/gpu with kgwe.io/sharing: mig")
        else:
            plan.refusals.append(f"MIG: no {scope} node offers MIG slices; this cluster has {describe_cluster(model)}")
        return False
    if wanted_profile:
        if not any(o[1] == wanted_profile for o in offers):
            plan.refusals.append(
                f"MIG profile {wanted_profile}: no node offers it; this cluster has {describe_cluster(model)}"
            )
            return False
        if intent.gpu_memory_bytes is not None and (profile_gb(wanted_profile) or 0) * GIB < intent.gpu_memory_bytes:
            plan.refusals.append(
                f"MIG profile {wanted_profile} has less than the {format_bytes(intent.gpu_memory_bytes)} asked "
                "by kgwe.io/gpu-memory"
            )
            return False
        profile = wanted_profile
    else:
        # The smallest fitting slice anywhere (SPEC), whatever the strategy of the nodes offering it, among
        # those with a slice free now.
        fitting = fitting_in_order([(t, p, i) for t, p, i, _s in offers], intent.gpu_memory_bytes)
        if not fitting:
            asked = format_bytes(intent.gpu_memory_bytes) if intent.gpu_memory_bytes else "the memory asked"
            plan.refusals.append(f"MIG: no slice has {asked}; this cluster has {describe_cluster(model)}")
            return False
        profile = first_free(fitting, offers, demand, model)
    strategy = next(s for s in STRATEGY_ORDER if any(o[1] == profile and o[3] == s for o in offers))
    types = [t for t in candidates if any(o[0] == t and o[1] == profile and o[3] == strategy for o in offers)]
    # Slices per pod: the count of whole GPUs asked becomes the count of slices.
    slices = demand.whole_gpus + demand.mig.get(profile, 0)
    most = max(
        (model.nodes[n].mig_profiles.get(profile, 0) for t in types for n in model.types[t].mig[profile].nodes[:50]),
        default=0,
    )
    if slices > most:
        plan.refusals.append(
            f"this pod asks for {slices} MIG {profile} slices on one node; the most any node has is {most}"
        )
        return False
    other_mig = [p for p in demand.mig if p != profile]
    if other_mig:
        plan.refusals.append(f"the pod asks for MIG {', '.join(other_mig)} and MIG {profile}: one profile per pod")
        return False
    plan.types = types
    plan.sharing = "mig"
    plan.mig_profile = profile
    plan.mig_strategy = strategy
    if strategy == "mixed":
        plan.resource_renames = {resources.NVIDIA_GPU: f"nvidia.com/mig-{profile}"}
    elif strategy == "single":
        products = sorted({p for t in types for p in model.types[t].mig[profile].products})
        plan.requirements.append(Requirement(keys.NVIDIA_GPU_PRODUCT, "In", tuple(products)))
    else:
        plan.requirements.append(Requirement(keys.GKE_GPU_PARTITION_SIZE, "In", (profile,)))
    plan.requirements.append(Requirement(keys.NVIDIA_MIG_CONFIG_STATE, "NotIn", UNSETTLED_STATES))
    plan.steps.append("mig")
    return True
