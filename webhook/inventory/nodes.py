"""The node view (`/api/v1/nodes`, `kgwe nodes`): every node's GPUs as KGWE read them (type and its
source, MIG, sharing, NVLink, topology freshness, what is allocatable and used), and per accelerator type
the capacity left, in GPU-equivalents and as pods get it (whole GPUs, MIG slices per profile)."""

from __future__ import annotations

import time
from typing import Any

from policies.vocabulary.accelerator_types import MIXED, UNKNOWN
from webhook.cluster.device_classes import dra_used
from webhook.cluster.node_facts import NodeFacts
from webhook.inventory.capacity import Inventory, TypeCapacity
from webhook.inventory.node_units import gpu_resources, node_resources
from webhook.inventory.numbers import ZERO, number, utc_stamp

# Node label prefixes the node view shows; everything else (and every annotation) stays hidden.
SHOWN_LABEL_PREFIXES = ("kgwe.io/", "nvidia.com/", "topology.kubernetes.io/")


def _fully_mig(facts: NodeFacts) -> bool:
    """Every GPU of the node is MIG-partitioned: MIG devices and no whole GPU to give a pod."""
    if not facts.mig_profiles:
        return False
    if facts.mig_strategy in ("single", "gke"):
        return True
    return facts.allocatable.get("nvidia.com/gpu", ZERO) <= 0


def _node_row(inventory: Inventory, facts: NodeFacts, elapsed: float) -> dict[str, Any]:
    model = inventory.model
    type_id = facts.accelerator_type or None
    accel = model.table.get(facts.accelerator_type) if facts.is_typed else None
    memory = facts.gpu_memory_mib
    if memory is None and facts.topology is not None and facts.topology.gpus:
        memory = facts.topology.gpus[0].memory_mib
    used = inventory.node_used.get(facts.name, {})
    if facts.type_source == "dra":
        used = dra_used(facts)
    age = facts.topology_age_seconds
    allocatable = gpu_resources(facts)
    units, used_equivalents, free_equivalents = node_resources(facts, allocatable, used)
    return {
        "name": facts.name,
        "acceleratorType": type_id,
        "productName": accel.product_name if accel else None,
        "typeSource": facts.type_source,
        "gpus": facts.gpu_count,
        "memoryMiB": memory,
        "architecture": accel.architecture if accel else facts.labels.get("nvidia.com/gpu.family"),
        "mig": {"strategy": facts.mig_strategy, "ready": facts.mig_ready, "profiles": dict(facts.mig_profiles)},
        "sharing": {"strategy": facts.sharing, "replicas": facts.replicas},
        # A GPU in MIG mode cannot use NVLink (docs/topology.md): a node with no whole GPU left has no domain.
        "nvlinkDomainSize": 0 if _fully_mig(facts) else facts.nvlink_domain_size,
        "clique": facts.clique,
        "labels": {k: v for k, v in facts.labels.items() if k.startswith(SHOWN_LABEL_PREFIXES)},
        "allocatable": {k: number(v) for k, v in allocatable.items()},
        "used": {k: number(v) for k, v in used.items()},
        # The same numbers with their unit (GPU, MPS replica, 1g.10gb slice): only one unit adds up with itself.
        "resources": units,
        "usedGpuEquivalents": number(used_equivalents),
        "freeGpuEquivalents": number(free_equivalents),
        "pods": inventory.node_gpu_pods.get(facts.name, 0),
        "unschedulable": facts.unschedulable,
        "taints": [{"key": t.key, "value": t.value, "effect": t.effect} for t in facts.taints],
        "topology": {
            "present": facts.topology is not None,
            "ageSeconds": round(age + elapsed, 1) if age is not None else None,
            "stale": facts.topology_stale,
        },
        "notes": list(facts.notes),
    }


def nodes_view(inventory: Inventory) -> dict[str, Any]:
    model = inventory.model
    elapsed = max(0.0, time.monotonic() - model.built_at)
    nodes = [_node_row(inventory, model.nodes[name], elapsed) for name in sorted(model.nodes)]
    types = []
    for type_id in sorted(model.types, key=lambda t: (t in (UNKNOWN, MIXED), t)):
        summary = model.types[type_id]
        accel = model.table.get(type_id)
        capacity = inventory.types.get(type_id, TypeCapacity())
        shared = list(capacity.shared.values())
        types.append({
            "id": type_id,
            "productName": accel.product_name if accel else None,
            "nodes": len(summary.nodes),
            "gpus": summary.gpus_total,
            "available": number(capacity.equivalents_available()),
            # The same capacity counted as what pods get: whole GPUs (physical, MPS and time-slicing
            # replicas folded back), and MIG slices as slices per profile, never as fractions of a GPU.
            "wholeGpus": number(capacity.whole.allocatable + sum((b.allocatable for b in shared), ZERO)),
            "wholeAvailable": number(capacity.whole.available + sum((b.available for b in shared), ZERO)),
            "slices": {
                profile: {"available": number(bucket.available), "total": number(bucket.allocatable)}
                for profile, bucket in sorted(capacity.mig.items())
            },
        })
    return {"generatedAt": utc_stamp(inventory.generated_at), "nodes": nodes, "types": types}
