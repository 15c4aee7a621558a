"""Where a shared or exclusive GPU is chosen: MPS (with its thread and memory limits), time-slicing, or
exclusive GPUs (no MPS or time-sliced node). MIG is its own step (webhook/placement/mig.py).

Each step acts only when the pod asks for its mode (`ctx.sharing`), keeps the types with nodes shared
that way, and selects those nodes by the label they carry.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from policies.gpu_demand import pod_gpu_demand
from policies.vocabulary import keys
from policies.vocabulary.objects import PodView
from policies.vocabulary.quantities import MIB
from webhook.cluster.model import ClusterModel
from webhook.placement.constraints import Requirement
from webhook.placement.context import PlanContext, describe_cluster
from webhook.placement.dra_planner import DRA_PLANNER
from webhook.placement.trace import record

L_SHARING = keys.NVIDIA_GPU_SHARING_STRATEGY

# Labels that mark an MPS-shared node, best first: GFD's sharing strategy, the device plugin's MPS
# daemon selector, GKE's sharing strategy.
MPS_MARKERS = ((L_SHARING, "mps"), ("nvidia.com/mps.capable", "true"), (keys.GKE_GPU_SHARING_STRATEGY, "mps"))


def _sharing_requirement(model: ClusterModel, nodes: list[str]) -> Requirement:
    """A requirement on a label every MPS node carries (checked on a bounded sample per request)."""
    sample = [model.nodes[n].labels for n in nodes[:64]]
    for key, value in MPS_MARKERS:
        if all(labels.get(key, "").lower() == value for labels in sample):
            return Requirement(key, "In", (value,))
    return Requirement(L_SHARING, "In", ("mps",))


def _shared_types(ctx: PlanContext, step: str, mode: str, shared: str, offers: Callable[[str], bool]) -> list[str]:
    """The candidate types with nodes shared this way, recorded in the trace; none: the plan is refused."""
    types = [t for t in ctx.candidates if offers(t)]
    record(ctx.plan, step, types, f"no node of this type is {shared}")
    if not types:
        asked = "/".join(ctx.candidates) if ctx.explicit_types else "GPU"
        ctx.plan.refusals.append(f"{mode}: no {asked} node is {shared}; this cluster has {describe_cluster(ctx.model)}")
    return types


def _max_container_gpus(pod: PodView) -> int:
    """The most whole GPUs any one app container asks for."""
    most = 0
    for container in pod.containers:
        demand = pod_gpu_demand({"spec": {"containers": [container.raw]}})
        most = max(most, demand.whole_gpus)
    return most


def mps(ctx: PlanContext) -> bool:
    """MPS: nodes shared with MPS, one GPU share per container, the fraction as the active-thread
    percentage and `kgwe.io/gpu-memory` as the pinned memory limit. On DRA nodes: a share through
    consumable capacity (webhook/dra/plan.py `plan_dra_share`)."""
    if ctx.sharing != "mps":
        return True
    if ctx.plan.backend == "dra":  # a share of a GPU through DRA's consumable capacity
        return DRA_PLANNER.value.plan_dra_share(ctx)
    plan, model = ctx.plan, ctx.model
    mps_types = _shared_types(ctx, "mps", "MPS sharing", "shared with MPS", lambda t: bool(model.types[t].mps_nodes))
    if not mps_types:
        return False
    max_container_gpus = _max_container_gpus(ctx.pod)
    if max_container_gpus > 1:
        plan.refusals.append(
            f"MPS sharing gives each container one share of one GPU; a container asks for {max_container_gpus} "
            "nvidia.com/gpu (ask for 1, and set kgwe.io/gpu-fraction)"
        )
        return False
    ctx.candidates = mps_types
    plan.sharing = "mps"
    plan.gpu_fraction = ctx.fraction
    if ctx.fraction is not None:
        plan.env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] = str(max(1, min(100, math.floor(ctx.fraction * 100))))
    if ctx.intent.gpu_memory_bytes is not None:
        mib = int((ctx.intent.gpu_memory_bytes / MIB).to_integral_value(rounding="ROUND_CEILING"))
        plan.env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] = f"0={mib}M"
    plan.requirements.append(_sharing_requirement(model, [n for t in mps_types for n in model.types[t].mps_nodes]))
    plan.steps.append("mps")
    return True


def time_slicing(ctx: PlanContext) -> bool:
    """Time-slicing: nodes whose GPUs are time-sliced, selected by GFD's sharing-strategy label."""
    if ctx.sharing != "time-slicing":
        return True
    plan, model = ctx.plan, ctx.model
    ts_types = _shared_types(
        ctx, "time-slicing", "time-slicing", "time-sliced", lambda t: bool(model.types[t].timeslice_nodes)
    )
    if not ts_types:
        return False
    ctx.candidates = ts_types
    plan.sharing = "time-slicing"
    plan.requirements.append(Requirement(L_SHARING, "In", ("time-slicing",)))
    plan.steps.append("time-slicing")
    return True


def exclusive(ctx: PlanContext) -> bool:
    """Exclusive GPUs, when asked for: types with nodes neither shared nor MIG-partitioned, and never an
    MPS or time-sliced node."""
    if ctx.sharing != "exclusive":
        return True
    plan, model, candidates = ctx.plan, ctx.model, ctx.candidates
    excl = [t for t in candidates if model.types[t].exclusive_nodes]
    record(plan, "exclusive", excl, "every node of this type is shared or MIG-partitioned")
    if not excl:
        plan.refusals.append(f"exclusive GPUs: every {'/'.join(candidates)} node is shared or MIG-partitioned")
        return False
    ctx.candidates = excl
    plan.requirements.append(Requirement(L_SHARING, "NotIn", ("mps", "time-slicing")))
    plan.steps.append("exclusive")
    return True
