"""The placement plan's DRA branch: which backend renders the pod, MIG choices, and the rendering.

This module is the DRA planner of the placement (webhook/placement/dra_planner.py): the pipeline
(webhook/placement/plan.py) calls `choose_backend` from its backend step, `plan_dra_mig` from the MIG step
on DRA nodes, `plan_dra_share` from the MPS step on DRA nodes (a share of a GPU through consumable
capacity), and runs `dra_claims` (registered at its name) as the step that renders the claims (with the pod's device
tolerations, and `kgwe.io/topology: pcie` as GPUs beside NICs). A sized gang on multi-node NVLink also
gets its ComputeDomain here (`attach_compute_domain`).
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from policies.gpu_demand import GpuDemand, mig_compute_slices, pod_gpu_demand
from policies.vocabulary.accelerator_types import MigProfile
from policies.vocabulary.objects import PodView, pod_view
from policies.vocabulary.quantities import GIB
from webhook.cluster.model import ClusterModel
from webhook.config import Config
from webhook.dra.backend import DRA, split_by_backend
from webhook.dra.compute_domain import compute_domain, gang_of, multi_node_nvlink, node_count
from webhook.dra.pcie import aligned_types
from webhook.dra.render import RequestShape, render
from webhook.dra.shares import ShareAsk, offers, percent, shared_types
from webhook.dra.tolerations import device_tolerations
from webhook.dra_rendering import DraRendering
from webhook.intent import PodIntent
from webhook.placement.context import PlacementPlan, PlanContext, describe_cluster, format_bytes
from webhook.placement.trace import record


def choose_backend(plan: PlacementPlan, candidates: list[str], model: ClusterModel, config: Config) -> list[str]:
    """Set the plan's backend from its most preferred type; keep the candidates rendered that way."""
    backend, kept, dropped = split_by_backend(model, candidates, config.dra)
    if dropped:
        other = "DRA" if backend != DRA else "the device plugin"
        plan.warnings.append(
            f"{', '.join(dropped)}: GPUs published through {other}; this pod is written for "
            f"{'DRA' if backend == DRA else 'device-plugin'} nodes ({', '.join(kept)})"
        )
    plan.backend = backend
    return kept


def _memory_gb(profile: str, info: MigProfile | None) -> int | None:
    if info is not None:
        return info.memory_gb
    try:
        return int(profile.split("+")[0].split(".")[-1].removesuffix("gb"))
    except ValueError:
        return None


def plan_dra_mig(
    plan: PlacementPlan,
    pod: PodView,
    demand: GpuDemand,
    candidates: list[str],
    wanted_profile: str | None,
    intent: PodIntent,
    model: ClusterModel,
) -> bool:
    """MIG on DRA nodes: every profile that fits, smallest first (memory, then compute), each offered by
    a node with enough slices for the pod; the claim tries them in that order."""
    offers: dict[str, tuple[int, int, list[str]]] = {}  # profile -> (memory GB, compute, types)
    for type_id in candidates:
        accel = model.table.get(type_id)
        for profile, offer in model.types[type_id].mig.items():
            if "dra" not in offer.strategies:
                continue
            info = accel.mig_profile(profile) if accel else None
            memory = _memory_gb(profile, info)
            if memory is None:
                continue
            compute = info.compute_slices if info else mig_compute_slices(profile)
            offers.setdefault(profile, (memory, compute, []))[2].append(type_id)
    scope = "/".join(candidates) if candidates else "GPU"
    if not offers:
        plan.refusals.append(f"MIG: no {scope} DRA device is a MIG slice; this cluster has {describe_cluster(model)}")
        return False
    asked = intent.gpu_memory_bytes
    if wanted_profile:
        if wanted_profile not in offers:
            plan.refusals.append(
                f"MIG profile {wanted_profile}: no DRA device offers it; this cluster has {describe_cluster(model)}"
            )
            return False
        if asked is not None and offers[wanted_profile][0] * GIB < asked:
            plan.refusals.append(
                f"MIG profile {wanted_profile} has less than the {format_bytes(asked)} asked by kgwe.io/gpu-memory"
            )
            return False
        fitting = [wanted_profile]
    else:
        fitting = sorted(
            (p for p, (memory, _c, _t) in offers.items() if asked is None or memory * GIB >= asked),
            key=lambda p: (offers[p][0], offers[p][1], p),
        )
        if not fitting:
            plan.refusals.append(
                f"MIG: no slice has {format_bytes(asked) if asked else 'the memory asked'}; "
                f"this cluster has {describe_cluster(model)}"
            )
            return False
    other = [p for p in demand.mig if p not in fitting]
    if other and wanted_profile:
        plan.refusals.append(f"the pod asks for MIG {', '.join(other)} and MIG {wanted_profile}: one profile per pod")
        return False
    slices = demand.whole_gpus + sum(demand.mig.values())
    most = {
        p: max(
            (model.nodes[n].mig_profiles.get(p, 0) for t in offers[p][2] for n in model.types[t].mig[p].nodes[:64]),
            default=0,
        )
        for p in fitting
    }
    roomy = [p for p in fitting if most[p] >= slices]
    if not roomy:
        plan.refusals.append(
            f"this pod asks for {slices} MIG slices on one node; the most any node has is "
            f"{max(most.values(), default=0)} ({', '.join(f'{p}: {most[p]}' for p in fitting)})"
        )
        return False
    roomy = free_first(roomy, offers, slices, pod, model)
    plan.types = [t for t in candidates if any(t in offers[p][2] for p in roomy)]
    plan.sharing = "mig"
    plan.mig_profile = roomy[0]
    plan.mig_strategy = "dra"
    plan.mig_choices = roomy
    plan.steps.append("mig")
    return True


def free_first(
    fitting: list[str], offers: dict[str, tuple[int, int, list[str]]], slices: int, pod: PodView, model: ClusterModel
) -> list[str]:
    """The fitting profiles starting with the smallest that has `slices` free now on one node (its devices
    untainted for the pod's tolerations, its counters left after the allocated partitions), then the
    larger ones, then the smaller ones that are all taken now: the scheduler takes the first it can
    allocate, and the pod is charged as the first."""
    tolerations = device_tolerations(pod.tolerations, model, [t for p in fitting for t in offers[p][2]])
    free: dict[str, dict[str, int]] = {}  # node -> profile -> free now (each node worked out once)
    for index, profile in enumerate(fitting):
        for type_id in offers[profile][2]:
            for name in model.types[type_id].mig[profile].nodes[:64]:
                dra = model.nodes[name].dra
                if dra is None:
                    continue
                if name not in free:
                    free[name] = dra.free_mig(tolerations)
                if free[name].get(profile, 0) >= slices:
                    return [*fitting[index:], *fitting[:index]]
    return fitting


def plan_dra_share(ctx: PlanContext) -> bool:
    """MPS on DRA nodes: a share of one GPU that allows multiple allocations (consumable capacity), by the
    fraction or memory asked (webhook/dra/shares.py); the types whose shared GPUs can give it."""
    plan, model = ctx.plan, ctx.model
    ask = ShareAsk(ctx.fraction, ctx.intent.gpu_memory_bytes)
    found = offers(model, ctx.candidates, ask, device_tolerations(ctx.pod.tolerations, model, ctx.candidates))
    kept = [o.type_id for o in found]
    record(plan, "mps", kept, "no DRA GPU of this type allows multiple allocations of the share asked")
    if not found:
        asked = "/".join(ctx.candidates) if ctx.explicit_types else "GPU"
        shared = shared_types(model, ctx.candidates)
        why = (f"the shared DRA GPUs of {', '.join(shared)} cannot give {_share_text(ask)}" if shared
               else "no DRA GPU allows multiple allocations")
        plan.refusals.append(f"MPS sharing: no {asked} node is shared with MPS ({why}); "
                             f"this cluster has {describe_cluster(model)}")
        return False
    most = max((d.whole_gpus for d in _container_demands(ctx.pod)), default=0)
    if most > 1:
        plan.refusals.append(
            f"MPS sharing gives each container one share of one GPU; a container asks for {most} "
            "nvidia.com/gpu (ask for 1, and set kgwe.io/gpu-fraction)"
        )
        return False
    ctx.candidates = kept
    plan.types = kept
    plan.sharing = "mps"
    # Charged as the largest part of a GPU the share takes on any type it may get.
    plan.gpu_fraction = ctx.fraction if ctx.fraction is not None else max(o.fraction for o in found)
    if not any(o.free for o in found):
        plan.warnings.append(f"MPS share through DRA: no shared GPU has {_share_text(ask)} left now; "
                             "the pod waits for a share to be released")
    plan.notes.append("MPS share through DRA: " + "; ".join(
        f"{o.type_id} {', '.join(f'{k}={v}' for k, v in o.requests) or 'the driver default'} "
        f"(~{percent(o.fraction)}% of a GPU)" for o in found))
    plan.steps.append("mps")
    return True


def _share_text(ask: ShareAsk) -> str:
    parts = []
    if ask.fraction is not None:
        parts.append(f"a {ask.fraction.normalize():f} share")
    if ask.memory is not None:
        parts.append(format_bytes(ask.memory))
    return " and ".join(parts) or "a share"


def _container_demands(pod: PodView) -> list[GpuDemand]:
    return [pod_gpu_demand({"spec": {"containers": [c.raw]}}) for c in pod.containers]


def dra_claims(ctx: PlanContext) -> bool:
    """The DRA step: a pod KGWE places on DRA nodes gets its claims and templates rendered. PCIe alignment
    is written only as a DRA claim: a pod asking it elsewhere is refused."""
    if ctx.topology == "pcie" and ctx.plan.backend != DRA and ctx.plan.gpu_pod:
        ctx.plan.refusals.append(
            "kgwe.io/topology pcie: GPUs beside NICs under one PCIe root are asked through DRA claims; "
            f"{'/'.join(ctx.plan.types or ctx.candidates) or 'the GPUs this pod may use'} are published by the "
            "device plugin"
        )
        return False
    if ctx.plan.backend == "dra" and ctx.narrowed:
        return render_dra(ctx.plan, ctx.pod, ctx.model, ctx.config, ctx.topology, ctx.fraction)
    return True


def render_dra(
    plan: PlacementPlan, pod: PodView | Mapping[str, Any], model: ClusterModel, config: Config,
    topology: str | None = None, fraction: Decimal | None = None,
) -> bool:
    """Write the plan as claims and templates; False (with a refusal) when no device could satisfy them."""
    view = pod_view(pod)
    mig = plan.mig_choices if plan.sharing == "mig" else []
    # The share as asked (plan.gpu_fraction is what it is charged, which may come from the memory asked).
    share = ShareAsk(fraction, plan.gpu_memory_bytes) if plan.sharing == "mps" else None
    nic_class = None
    if topology == "pcie":
        kept, refusal = aligned_types(model, config.dra, plan.types, mig, share is not None, view)
        if refusal:
            plan.refusals.append(refusal)
            return False
        plan.types = kept
        nic_class = config.dra.nic_device_class
        plan.steps.append("pcie")
    tolerations = device_tolerations([*view.tolerations, *plan.tolerations], model, plan.types)
    shape = RequestShape(tuple(tolerations), nic_class)
    rendering, refusal = render(pod, model, config.dra, plan.types, mig, share=share, shape=shape)
    if refusal:
        plan.refusals.append(refusal)
        return False
    if rendering is not None and rendering.claims:
        attach_compute_domain(plan, pod, rendering, model)
        plan.dra = rendering
        plan.steps.append("dra")
    return True


def attach_compute_domain(
    plan: PlacementPlan, pod: PodView | Mapping[str, Any], rendering: DraRendering, model: ClusterModel
) -> None:
    """A sized gang on multi-node NVLink cliques gets its ComputeDomain and channel claim
    (webhook/dra/compute_domain.py); any other pod is left as rendered."""
    member = gang_of(pod, plan.labels)
    # MIG slices have no NVLink: a gang of slices gets no channel.
    if member is None or plan.sharing == "mig" or not multi_node_nvlink(model, plan.types):
        return
    gang, size = member
    gpus_per_pod = sum(int(Decimal(v)) for moved in rendering.moved.values() for v in moved.values())
    namespace = pod_view(pod).namespace or "default"
    rendering.compute_domain = compute_domain(namespace, gang, node_count(model, plan.types, size, gpus_per_pod))
    plan.notes.append(f"gang {gang}: IMEX channel of ComputeDomain {rendering.compute_domain['metadata']['name']}")


# What the assembly registers in `webhook.placement.plan.PLAN_STEPS` (this module itself fills
# `webhook.placement.dra_planner.DRA_PLANNER`).
PLAN_STEPS = {"dra-claims": dra_claims}
