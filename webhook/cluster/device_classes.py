"""A node's DRA devices by DeviceClass, as the node view and availability show them beside extended
resources: `gpu.nvidia.com` (whole GPUs) and `mig.nvidia.com/<profile>`."""

from __future__ import annotations

from decimal import Decimal

from webhook.cluster.node_facts import NodeFacts

DRA_GPUS = "gpu.nvidia.com"
DRA_MIG_PREFIX = "mig.nvidia.com/"


def dra_allocatable(facts: NodeFacts) -> dict[str, Decimal]:
    """The node's DRA devices by DeviceClass, as the node view shows them beside extended resources:
    `gpu.nvidia.com` (whole GPUs) and `mig.nvidia.com/<profile>` (the most slices of the profile at once),
    tainted devices left out."""
    if facts.dra is None:
        return {}
    out: dict[str, Decimal] = {}
    if facts.dra.gpus:
        out[DRA_GPUS] = Decimal(facts.dra.untainted_gpus())
    for profile, count in facts.dra.untainted_mig().items():
        out[DRA_MIG_PREFIX + profile] = Decimal(count)
    return out


def dra_used(facts: NodeFacts) -> dict[str, Decimal]:
    """What of `dra_allocatable` cannot be allocated now: held by allocated ResourceClaims, a shared GPU
    with shares allocated, or partitions whose counters allocated devices took."""
    if facts.dra is None:
        return {}
    allocatable = dra_allocatable(facts)
    free: dict[str, int] = {DRA_GPUS: facts.dra.free_gpus()} if facts.dra.gpus else {}
    free.update({DRA_MIG_PREFIX + p: n for p, n in facts.dra.free_mig().items()})
    out: dict[str, Decimal] = {}
    for key, total in allocatable.items():
        used = max(Decimal(0), total - free.get(key, 0))
        if used:
            out[key] = used
    return out
