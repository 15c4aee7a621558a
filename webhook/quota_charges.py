"""What a pod counts against its tenant's quotas: its candidate accelerator types (or the type of the node it
is bound to), its GPU-equivalents (SPEC section 6) and its GPU memory.

The one rule, used by admission's quota gate (the pod being admitted, from its `Facts`), by the usage every
quota check compares against (every unfinished GPU pod of the cluster snapshot), by the inventory and by the
audit. Whose the pod is comes from webhook/admission/tenancy.py; what pods hold through DRA claims of their
own, from the DRA wing through its seam (webhook/cluster/claim_charging.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal
from typing import Any, Protocol

import orjson

from policies.gpu_demand import pod_gpu_demand
from policies.quota.model import PodCharge
from policies.vocabulary.keys import QUOTA_GATE
from policies.vocabulary.objects import PodView, pod_view
from policies.vocabulary.quantities import GIB, parse_quantity
from webhook.admission.facts import Facts
from webhook.cluster.claim_charging import CLAIM_CHARGING
from webhook.cluster.model import ClusterModel, pod_is_finished
from webhook.cluster.node_facts import NodeFacts
from webhook.cluster.shared_parts import amount, constant
from webhook.costs import pod_gpu_equivalents, pod_profile, requested_sharing
from webhook.intent import A_GPU_MEMORY, A_PROFILE, OUT_ACCELERATOR_TYPE, OUT_DECISION, OUT_TENANT


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
    gb = model.table.memory_gb(bound_type or candidates[0]) if units and (bound_type or candidates) else None
    if notes.get(A_GPU_MEMORY):
        try:
            memory = parse_quantity(notes[A_GPU_MEMORY]) * units
        except ValueError:
            memory = None
        # `kgwe.io/gpu-memory` is a minimum the creator writes: a GPU the pod holds whole is all its memory,
        # whatever was asked (1Mi on eight exclusive H100s held 640Gi and counted 8Mi against gpuMemory).
        held = _whole_gpus_held(view, demand.whole_gpus, node, facts)
        if memory is not None and held and gb:
            memory = max(memory, Decimal(gb) * GIB * held)
    elif gb:
        memory = Decimal(gb) * GIB * units
    namespace = view.namespace or (facts.request.namespace if facts else "")
    return PodCharge(
        namespace=namespace,
        name=view.name or view.generate_name,
        uid=view.uid or None,
        candidate_types=constant(candidates),
        bound_type=bound_type,
        profile=notes.get(A_PROFILE),
        # Held once across pods: every memo of every pod's charge holds them (webhook/cluster/shared_parts.py).
        gpu_equivalents=amount(equivalents),
        gpu_memory_bytes=amount(memory),
        tenant=notes.get(OUT_TENANT),
        namespace_labels=model.namespace_labels(namespace, shared=True),
        gated=QUOTA_GATE in view.scheduling_gates,
    )


def priced_by_type_sharing(pod: PodView | Mapping[str, Any], model: ClusterModel) -> bool:
    """Whether the pod's charge on no known node reads the nodes of its types: only its price before binding does
    (webhook/costs.py `_sharing_before_binding`, `requested_sharing`), and only when it asks MPS or time-slicing,
    itself or through its HardwareProfile (the replicas of the type's nodes with that mode). Any other pod on no
    node is charged alike whatever the nodes are, so a node's change need not read it again (the quota controller's
    kept picture, webhook/quotas/incremental.py; tests/quotas/test_incremental_picture.py checks the two)."""
    view = pod_view(pod)
    return requested_sharing(view, pod_profile(view, model)) in ("mps", "time-slicing")


def _whole_gpus_held(view: PodView, whole_gpus: int, node: NodeFacts | None, facts: Facts | None) -> int:
    """How many of the pod's `nvidia.com/gpu` units are whole GPUs it holds alone: none when they are MPS or
    time-sliced replicas or MIG slices (the single strategy names slices `nvidia.com/gpu`), by the plan at
    admission, else by the node it is bound to and the sharing KGWE decided (`kgwe.io/decision`)."""
    if not whole_gpus:
        return 0
    if facts is not None:
        return whole_gpus if facts.plan.sharing == "exclusive" and facts.plan.mig_profile is None else 0
    if node is not None and (node.sharing in ("mps", "time-slicing") or node.mig_strategy in ("single", "gke")):
        return 0
    try:
        decision = orjson.loads(view.annotation(OUT_DECISION) or "{}")
    except orjson.JSONDecodeError:
        decision = {}
    shared = isinstance(decision, dict) and (decision.get("sharing") not in (None, "exclusive") or "mig" in decision)
    return 0 if shared else whole_gpus


def usage_charges(model: ClusterModel) -> list[PodCharge]:
    """What every unfinished GPU pod counts against quotas (the same rule as admission's quota check),
    including the GPUs pods hold or ask through DRA of their own (`claimed_charges`)."""
    charges = []
    for pod in model.pods.values():
        if pod_is_finished(pod):
            continue
        charge = pod_charge(pod, model, None)
        if charge is not None:
            charges.append(charge)
    for _pod, claimed in CLAIM_CHARGING.value.claimed_charges(model):
        charges.extend(claimed)
    return charges


class ReadOfPod(Protocol):
    """A per-pod memo entry: the pod object it was read from, the facts of the node it was bound to (None: on no
    known node) and, for such a pod, the epoch of every node's facts it was read against (ChargeEpochs)."""

    @property
    def pod(self) -> dict[str, Any]: ...

    @property
    def node(self) -> NodeFacts | None: ...

    @property
    def nodes_epoch(self) -> int: ...


def still_read(entry: ReadOfPod | None, pod: dict[str, Any], node: NodeFacts | None, nodes_epoch: int) -> bool:
    """Whether `entry` was read from this very pod object against the same node facts: the store never changes
    an object in place, so the same objects mean the same inputs (the audit's ChargeMemo, the inventory's memo)."""
    return entry is not None and entry.pod is pod and entry.node is node and (
        node is not None or entry.nodes_epoch == nodes_epoch)
