"""The unit of each GPU resource a node offers, as a pod gets it: a whole GPU, an MPS or time-sliced replica,
or a MIG slice of one profile. The node view shows every number with its unit and adds up only numbers of
one unit: `nvidia.com/gpu` is GPUs on one node and MPS replicas on the next, and 2 GPUs + 16 slices + 4
replicas is no number at all. Where one figure must order nodes (the Free column's sort) it is
GPU-equivalents, said as such: a GPU 1, a slice its compute slices / 7, a replica 1 / replicas."""

from __future__ import annotations

from decimal import Decimal

from policies.gpu_demand import GpuDemand, mig_compute_slices
from policies.vocabulary import resources
from webhook.cluster.device_classes import dra_allocatable
from webhook.cluster.node_facts import GPU_RESOURCE, GPU_RESOURCE_PREFIXES, MIG_RESOURCE_PREFIX, NodeFacts
from webhook.cluster.shared_parts import amount as held_once
from webhook.inventory.numbers import ZERO, number

WHOLE_GPU_RESOURCES = (resources.NVIDIA_GPU, resources.AMD_GPU, "gpu.nvidia.com")
DRA_MIG_PREFIX = "mig.nvidia.com/"
REPLICA_NAMES = {"mps": "MPS replica", "time-slicing": "time-sliced replica"}


def _single_strategy_profile(facts: NodeFacts) -> str | None:
    """Under MIG's single (or GKE's) strategy `nvidia.com/gpu` counts slices of the node's one profile."""
    if facts.mig_strategy in ("single", "gke") and len(facts.mig_profiles) == 1:
        return next(iter(facts.mig_profiles))
    return None


def unit_of(facts: NodeFacts, resource: str) -> tuple[str, Decimal]:
    """(the unit one of `resource` is on this node, its worth in GPU-equivalents)."""
    if resource.startswith((MIG_RESOURCE_PREFIX, DRA_MIG_PREFIX)):
        profile = resource.removeprefix(MIG_RESOURCE_PREFIX).removeprefix(DRA_MIG_PREFIX)
        return f"{profile} slice", Decimal(mig_compute_slices(profile)) / 7
    if resource in WHOLE_GPU_RESOURCES:
        single = _single_strategy_profile(facts) if resource == resources.NVIDIA_GPU else None
        if single is not None:
            return f"{single} slice", Decimal(mig_compute_slices(single)) / 7
        if facts.sharing in REPLICA_NAMES and facts.replicas > 1:
            return REPLICA_NAMES[facts.sharing], Decimal(1) / facts.replicas
        return "GPU", Decimal(1)
    # Other nvidia.com/* resources (HAMi's memory and cores, renamed shares): their own name, not GPUs.
    return resource.rsplit("/", 1)[-1], ZERO


def node_resources(
    facts: NodeFacts, allocatable: dict[str, Decimal], used: dict[str, Decimal]
) -> tuple[list[dict[str, str | int | float]], Decimal, Decimal]:
    """Per GPU resource the node has or uses: its unit, allocatable, used and free in that unit; and the
    node's used and free capacity in GPU-equivalents (what the Used and Free columns sort by)."""
    rows: list[dict[str, str | int | float]] = []
    used_equivalents = free_equivalents = ZERO
    for resource in sorted(set(allocatable) | set(used)):
        total, taken = allocatable.get(resource, ZERO), used.get(resource, ZERO)
        if not total and not taken:
            continue  # a MIG node's nvidia.com/gpu: 0 of 0 says nothing
        unit, worth = unit_of(facts, resource)
        free = max(ZERO, total - taken)
        used_equivalents += taken * worth
        free_equivalents += free * worth
        rows.append({"resource": resource, "unit": unit, "allocatable": number(total), "used": number(taken),
                     "free": number(free)})
    return rows, used_equivalents, free_equivalents


def gpu_resources(facts: NodeFacts) -> dict[str, Decimal]:
    """The node's GPU resources: its allocatable GPU extended resources and its DRA devices."""
    found = {k: v for k, v in facts.allocatable.items() if k.startswith(GPU_RESOURCE_PREFIXES)}
    return {**found, **dra_allocatable(facts)}


def whole_resource(facts: NodeFacts | None) -> str:
    """The resource a whole GPU of the node is: AMD's where the node offers only AMD's, else NVIDIA's."""
    if facts is not None and resources.AMD_GPU in facts.allocatable and GPU_RESOURCE not in facts.allocatable:
        return resources.AMD_GPU
    return GPU_RESOURCE


def demand_resources(demand: GpuDemand, facts: NodeFacts | None) -> dict[str, Decimal]:
    """A pod's GPU demand as the node's resource names (what it takes from the node's allocatable)."""
    out: dict[str, Decimal] = {}
    if demand.whole_gpus:
        out[whole_resource(facts)] = held_once(Decimal(demand.whole_gpus))
    for profile, count in demand.mig.items():
        out[MIG_RESOURCE_PREFIX + profile] = held_once(Decimal(count))
    for key, amount in demand.other.items():
        out[key] = out.get(key, ZERO) + amount
    return out
