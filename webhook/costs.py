"""The hourly cost of a pod's GPU share (SPEC section 6), shared by admission and the bound-pod controller.

Cost = GPU-equivalents x price per GPU-hour. Equivalents: a whole GPU on an exclusive node is 1, a MIG
slice its compute slices / 7, an MPS share the pod's `kgwe.io/gpu-fraction` (else 1 / replicas), a
time-sliced replica 1 / replicas. The price is the pod's `HardwareProfile` `spec.pricePerGPUHour` when the
profile lists the type, else the pricing configuration's price for the type.

One rule renders every cost (`format_hourly_cost`), so the webhook and the controller never disagree
about the same pod.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation
from typing import Any

import orjson

from policies.gpu_demand import GpuDemand, dra_rendered, gpu_equivalents, pod_gpu_demand
from policies.vocabulary import keys
from policies.vocabulary.objects import PodView, pod_view
from webhook.cluster.model import ClusterModel
from webhook.cluster.node_facts import NodeFacts
from webhook.config import Config

ANNOTATION_HOURLY_COST = keys.HOURLY_COST
ANNOTATION_PROFILE = keys.PROFILE
ANNOTATION_SHARING = keys.SHARING
ANNOTATION_GPU_FRACTION = keys.GPU_FRACTION
COST_QUANTUM = Decimal("0.0001")


def format_hourly_cost(cost: Decimal) -> str:
    """Round half-up to 4 decimal places, then drop trailing zeros and a bare point: 4.5, 0.6429, 18, 0."""
    text = format(cost.quantize(COST_QUANTUM, rounding=ROUND_HALF_UP), "f")
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return "0" if text in ("", "-0") else text


def parse_hourly_cost(text: object) -> Decimal | None:
    """The cost an annotation states, or None when it is not a finite non-negative decimal."""
    if not isinstance(text, str):
        return None
    try:
        value = Decimal(text.strip())
    except InvalidOperation:
        return None
    return value if value.is_finite() and value >= 0 else None


def _fraction(raw: object) -> Decimal | None:
    try:
        value = Decimal(str(raw).strip())
    except InvalidOperation:
        return None
    return value if value.is_finite() and 0 < value <= 1 else None


def pod_profile(pod: PodView | Mapping[str, Any], model: ClusterModel) -> dict[str, Any] | None:
    """The HardwareProfile the pod names (`kgwe.io/profile`), if it exists."""
    name = pod_view(pod).annotation(ANNOTATION_PROFILE)
    return model.hardware_profiles.get(name) if name else None


def price_per_gpu_hour(
    pod: PodView | Mapping[str, Any], type_id: str, model: ClusterModel, config: Config
) -> Decimal | None:
    profile = pod_profile(pod, model)
    if profile is not None:
        spec = profile.get("spec") or {}
        if type_id in (spec.get("acceleratorTypes") or []) and spec.get("pricePerGPUHour") is not None:
            try:
                return Decimal(str(spec["pricePerGPUHour"]))
            except InvalidOperation:
                pass
    return config.price_per_gpu_hour(type_id)


def requested_sharing(pod: PodView, profile: dict[str, Any] | None) -> str:
    """The sharing mode a pod asks before it is bound: its own annotation, else its HardwareProfile's."""
    mode = pod.annotation(ANNOTATION_SHARING) or ""
    if not mode and profile is not None:
        mode = str(((profile.get("spec") or {}).get("sharing") or {}).get("mode") or "")
    return mode


def _sharing_before_binding(
    pod: PodView, profile: dict[str, Any] | None, type_id: str, model: ClusterModel
) -> tuple[str, int]:
    """Sharing mode and replicas for a pod not yet on a node: its request, else its profile's mode.

    Replicas come from the type's nodes with that mode; where they differ the smallest count wins, so
    the cost shown before binding is never lower than the cost after it.
    """
    mode = requested_sharing(pod, profile)
    if mode not in ("mps", "time-slicing"):
        return "exclusive", 1
    summary = model.types.get(type_id)
    names = (summary.mps_nodes if mode == "mps" else summary.timeslice_nodes) if summary else []
    replicas = [model.nodes[n].replicas for n in names if n in model.nodes]
    return mode, min(replicas) if replicas else 1


def _on_node(demand: GpuDemand, facts: NodeFacts) -> GpuDemand:
    """Under MIG single strategy (and GKE partitions) `nvidia.com/gpu` units are the node's one MIG profile."""
    if facts.mig_strategy in ("single", "gke") and len(facts.mig_profiles) == 1 and demand.whole_gpus:
        profile = next(iter(facts.mig_profiles))
        mig = dict(demand.mig)
        mig[profile] = mig.get(profile, 0) + demand.whole_gpus
        return replace(demand, whole_gpus=0, mig=mig)
    return demand


def pod_gpu_equivalents(
    pod: PodView | Mapping[str, Any], node_facts: NodeFacts | None, type_id: str, model: ClusterModel
) -> Decimal:
    """The GPU-equivalents the pod's demand counts on `type_id` (bound to `node_facts`, or before binding)."""
    pod = pod_view(pod)
    demand = pod_gpu_demand(pod)
    profile = pod_profile(pod, model)
    demand = charged_demand(pod, demand)
    share = charged_share(pod)
    if share is not None:  # a share of a DRA GPU (consumable capacity), before and after binding
        return gpu_equivalents(demand, "mps", share, 1)
    if node_facts is not None:
        demand = _on_node(demand, node_facts)
        sharing = node_facts.sharing if node_facts.sharing in ("mps", "time-slicing") else "exclusive"
        replicas = node_facts.replicas
    else:
        sharing, replicas = _sharing_before_binding(pod, profile, type_id, model)
    fraction = _fraction(pod.annotation(ANNOTATION_GPU_FRACTION)) if sharing == "mps" else None
    if sharing == "mps" and fraction is None and profile is not None:
        fraction = _fraction(((profile.get("spec") or {}).get("sharing") or {}).get("gpuFraction"))
    return gpu_equivalents(demand, sharing, fraction, replicas)


def pod_share(
    pod: PodView | Mapping[str, Any], node_facts: NodeFacts | None, model: ClusterModel
) -> tuple[str, int]:
    """How the pod holds its GPUs, and how many devices: `whole` (exclusive GPUs), `mig` (slices), `mps`
    (shares), `time-slicing` (replicas), `dra` (devices of ResourceClaims KGWE wrote). The devices are what a
    whole-GPU allocation would need instead: one GPU per slice, share or replica (the savings of sharing)."""
    view = pod_view(pod)
    raw = pod_gpu_demand(view)
    demand = charged_demand(view, raw)
    if node_facts is not None:
        demand = _on_node(demand, node_facts)
    devices = demand.whole_gpus + sum(demand.mig.values())
    if demand.mig:
        return "mig", devices
    sharing = node_facts.sharing if node_facts is not None else ""
    if charged_share(view) is not None:
        sharing = "mps"
    if sharing in ("mps", "time-slicing"):
        return sharing, devices
    if dra_rendered(view):
        return "dra", devices
    return "whole", devices


def pod_hourly_cost(
    pod: PodView | Mapping[str, Any],
    node_facts: NodeFacts | None,
    type_id: str,
    model: ClusterModel,
    config: Config,
) -> Decimal | None:
    """Price of the pod's GPU share per hour on `type_id`; None when no price is known for that type.

    `node_facts` is the node the pod is bound to (its sharing mode and replicas decide the share); pass
    None at admission, before binding, and the pod's sharing request or profile stands in for the node.
    """
    price = price_per_gpu_hour(pod, type_id, model, config)
    if price is None:
        return None
    return pod_gpu_equivalents(pod, node_facts, type_id, model) * price


# How a pod whose GPUs the DRA wing moved into claims is charged, read from what its admission recorded
# (`kgwe.io/decision`), so that admission, the controller and the reports charge it alike.
def charged_demand(pod: PodView | Mapping[str, Any], demand: GpuDemand) -> GpuDemand:
    """A DRA MIG pod's demand as it is charged: its GPUs moved into the claim are slices of the first
    choice recorded in `kgwe.io/decision` (`"mig": "<profile>/dra"`), not whole GPUs."""
    if not demand.whole_gpus or not dra_rendered(pod):
        return demand
    try:
        decision = orjson.loads(pod_view(pod).annotation(keys.DECISION) or "{}")
    except orjson.JSONDecodeError:
        return demand
    mig = decision.get("mig") if isinstance(decision, dict) else None
    if not isinstance(mig, str) or not mig.endswith("/dra"):
        return demand
    profile = mig.removesuffix("/dra")
    slices = dict(demand.mig)
    slices[profile] = slices.get(profile, 0) + demand.whole_gpus
    return GpuDemand(whole_gpus=0, mig=slices, other=dict(demand.other), invalid=list(demand.invalid),
                     gpu_containers=list(demand.gpu_containers))


def charged_share(pod: PodView | Mapping[str, Any]) -> Decimal | None:
    """The part of a GPU a DRA share pod is charged (`kgwe.io/decision`: `"sharing": "mps"` with the
    fraction KGWE worked out from what the share takes), None for any other pod."""
    if not dra_rendered(pod):
        return None
    try:
        decision = orjson.loads(pod_view(pod).annotation(keys.DECISION) or "{}")
    except orjson.JSONDecodeError:
        return None
    if not isinstance(decision, dict) or decision.get("sharing") != "mps" or not decision.get("dra"):
        return None
    try:
        fraction = Decimal(str(decision.get("fraction")))
    except ArithmeticError:
        return None
    return fraction if fraction.is_finite() and 0 < fraction <= 1 else None
