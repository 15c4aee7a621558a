"""Tenancy and charging: whose a pod is, and what it counts against that tenant's quotas.

The one rule, used by admission's quota gate (the pod being admitted, from its `Facts`), by the usage
every quota check compares against (every unfinished GPU pod of the cluster snapshot), by the
inventory and by the audit. A pod's tenant is resolved from its namespace's labels and the
requester's groups against the `TenantQuota` objects (`policies.quota.model.resolve_tenant`); its
charge is its candidate accelerator types (or the type of the node it is bound to), its
GPU-equivalents (SPEC section 6) and its GPU memory.
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from policies.gpu_demand import pod_gpu_demand
from policies.quota.model import PodCharge, resolve_tenant
from policies.vocabulary.objects import PodView, pod_view
from policies.vocabulary.quantities import GIB, parse_quantity
from webhook.admission.facts import Facts
from webhook.admission.request import AdmissionRequest
from webhook.cluster.model import ClusterModel, pod_is_finished
from webhook.costs import pod_gpu_equivalents
from webhook.intent import A_GPU_MEMORY, A_PROFILE, OUT_ACCELERATOR_TYPE, OUT_TENANT


def tenant_and_quotas(request: AdmissionRequest, model: ClusterModel) -> tuple[str, list[dict[str, Any]]]:
    """The requester's tenant for this namespace and the `TenantQuota` objects that apply to it."""
    return resolve_tenant(
        request.namespace,
        model.namespace_labels(request.namespace),
        request.user.groups,
        list(model.tenant_quotas.values()),
    )


def pod_charge(pod: PodView | Mapping[str, Any], model: ClusterModel, facts: Facts | None) -> PodCharge | None:
    """What a pod counts against quotas: its candidate types (or bound type) and GPU-equivalents."""
    view = pod_view(pod)
    demand = facts.demand if facts is not None else pod_gpu_demand(view)
    if not demand.asks_gpu:
        return None
    notes = view.annotations
    node_name = view.node_name
    node = model.nodes.get(node_name) if node_name else None
    bound_type = node.accelerator_type if node is not None and node.is_typed else None
    if facts is not None:
        candidates = tuple(facts.plan.types)
        equivalents = facts.plan.gpu_equivalents
    else:
        candidates = tuple(t for t in notes.get(OUT_ACCELERATOR_TYPE, "").split(",") if t)
        type_id = bound_type or (candidates[0] if candidates else "")
        equivalents = pod_gpu_equivalents(view, node, type_id, model) if type_id else Decimal(demand.whole_gpus)
    if not candidates and bound_type is None:
        return None
    memory: Decimal | None = None
    units = demand.whole_gpus + sum(demand.mig.values())
    if notes.get(A_GPU_MEMORY):
        try:
            memory = parse_quantity(notes[A_GPU_MEMORY]) * units
        except ValueError:
            memory = None
    elif units and (bound_type or candidates):
        gb = model.table.memory_gb(bound_type or candidates[0])
        memory = Decimal(gb) * GIB * units if gb else None
    namespace = view.namespace or (facts.request.namespace if facts else "")
    return PodCharge(
        namespace=namespace,
        name=view.name or view.generate_name,
        uid=view.uid or None,
        candidate_types=candidates,
        bound_type=bound_type,
        profile=notes.get(A_PROFILE),
        gpu_equivalents=equivalents,
        gpu_memory_bytes=memory,
        tenant=notes.get(OUT_TENANT),
        namespace_labels=model.namespace_labels(namespace),
    )


def usage_charges(model: ClusterModel) -> list[PodCharge]:
    """What every unfinished GPU pod counts against quotas (the same rule as admission's quota check)."""
    charges = []
    for pod in model.pods.values():
        if pod_is_finished(pod):
            continue
        charge = pod_charge(pod, model, None)
        if charge is not None:
            charges.append(charge)
    return charges
