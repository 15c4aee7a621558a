"""Tenancy and charging: whose a pod is, and what it counts against that tenant's quotas.

The one rule, used by admission's quota gate (the pod being admitted, from its `Facts`), by the usage
every quota check compares against (every unfinished GPU pod of the cluster snapshot), by the
inventory and by the audit. A pod's tenant is resolved from its namespace's labels and the
requester's groups against the `TenantQuota` objects (`policies.quota.model.resolve_tenant`); its
charge is its candidate accelerator types (or the type of the node it is bound to), its
GPU-equivalents (SPEC section 6) and its GPU memory.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from decimal import Decimal
from typing import Any

import orjson

from policies.gpu_demand import pod_gpu_demand
from policies.quota.model import PodCharge, resolve_tenant
from policies.vocabulary.accelerator_types import MIXED
from policies.vocabulary.keys import QUOTA_GATE
from policies.vocabulary.objects import PodView, pod_view
from policies.vocabulary.quantities import GIB, parse_quantity
from webhook.admission.facts import Facts
from webhook.admission.request import AdmissionRequest
from webhook.cluster.model import ClusterModel, pod_is_finished
from webhook.cluster.node_facts import NodeFacts
from webhook.costs import pod_gpu_equivalents
from webhook.dra.claim_names import extended_claim_name, generated_claim_names
from webhook.dra.claimed import (
    HeldGpu,
    allocated_gpus,
    asks_extended_devices,
    devices_by_key,
    extended_requests,
    foreign_claims,
    mapped_resources,
    most_devices_on_a_node,
    recorded_by_kgwe,
    requested_gpus,
)
from webhook.dra.gpu_classes import GpuClasses
from webhook.intent import A_GPU_MEMORY, A_PROFILE, OUT_ACCELERATOR_TYPE, OUT_DECISION, OUT_TENANT


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
        candidate_types=candidates,
        bound_type=bound_type,
        profile=notes.get(A_PROFILE),
        gpu_equivalents=equivalents,
        gpu_memory_bytes=memory,
        tenant=notes.get(OUT_TENANT),
        namespace_labels=model.namespace_labels(namespace),
        gated=QUOTA_GATE in view.scheduling_gates,
    )


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


def claim_candidate_types(model: ClusterModel) -> tuple[str, ...]:
    """The types a GPU claim of the pod's own may be allocated: those published through DRA, else every
    type (a claim that no slice can satisfy yet is still charged, as the most expensive type)."""
    types = [t for t in model.types if t != MIXED]  # a node of several types is no type a limit names
    published = tuple(t for t in types if model.types[t].dra_nodes)
    return published or tuple(types)


def claimed_charge(
    view: PodView, model: ClusterModel, namespace: str, devices: int, held: list[HeldGpu] | None = None
) -> PodCharge | None:
    """What the GPUs a pod asks (`devices`) or holds (`held`) through its own ResourceClaims count against
    quotas.

    Allocated (`held`, devices of one type: callers charge each type apart): each device its worth (a MIG
    device its compute slices / 7), the pod bound to their type, memory what the devices have; devices of no
    known type count against every type a claim may get. Not allocated (`devices`): each device one
    whole GPU, with the largest memory of the types a claim may get, counted against the limit of every
    one of those types (the claim's own selectors pick among them, not KGWE).
    """
    held = held or []
    typed = [h.type_id for h in held if h.type_id]
    candidates: tuple[str, ...] = ()
    if typed and not devices:
        known = [h.memory_bytes for h in held if h.memory_bytes is not None]
        equivalents = sum((h.equivalents for h in held), Decimal(0))
        memory = sum(known, Decimal(0)) if len(known) == len(held) else None
    else:
        candidates = claim_candidate_types(model)
        count = devices + len(held)
        if count <= 0 or not candidates:
            return None
        largest = max((model.table.memory_gb(t) or 0 for t in candidates), default=0)
        equivalents = Decimal(count)
        memory = Decimal(largest) * GIB * count if largest else None
    return PodCharge(
        namespace=namespace,
        name=view.name or view.generate_name,
        uid=view.uid or None,
        candidate_types=candidates,
        bound_type=None if candidates else typed[0],
        profile=None,
        gpu_equivalents=equivalents,
        gpu_memory_bytes=memory,
        tenant=view.annotations.get(OUT_TENANT),
        namespace_labels=model.namespace_labels(namespace),
        every_candidate=bool(candidates),
        gated=QUOTA_GATE in view.scheduling_gates,
    )


class ClaimUsage:
    """What existing pods hold or ask through claims of their own, for one snapshot."""

    def __init__(self, model: ClusterModel, mapped: Mapping[str, str]) -> None:
        self.model = model
        self.mapped = mapped  # `mapped_resources` of the model's DeviceClasses
        self.devices = devices_by_key(model)
        self.classes = GpuClasses(model.device_classes)
        self.all_devices = most_devices_on_a_node(model)

    def charges(self, pod: dict[str, Any]) -> list[PodCharge]:
        """The pod's charges: one per type of the GPUs its claims hold (untyped ones: every candidate), and
        one for what its claims not yet allocated ask (every candidate)."""
        view = pod_view(pod)
        refs = foreign_claims(view, recorded_by_kgwe(view)).refs if view.spec.get("resourceClaims") else []
        extended = extended_requests(view, self.mapped, [])
        if not refs and not extended:
            return []
        namespace = view.namespace
        generated = generated_claim_names(view)
        held: list[HeldGpu] = []
        specs: list[tuple[str, Any]] = []
        if extended:
            # One claim the scheduler made for all of them, once it has: what it holds; before, what is asked.
            made = extended_claim_name(view)
            claim = self.model.resource_claims.get(f"{namespace}/{made}") if made else None
            if not self._held(claim, held):
                specs.extend(extended)
        for ref in refs:
            claim_name = ref.name if ref.kind == "ResourceClaim" else generated.get(ref.entry)
            claim = self.model.resource_claims.get(f"{namespace}/{claim_name}") if claim_name else None
            if claim is not None:
                if not self._held(claim, held):
                    specs.append((ref.entry, claim.get("spec")))
            elif ref.kind == "ResourceClaimTemplate":
                template = self.model.claim_templates.get(f"{namespace}/{ref.name}")
                spec = template.get("spec") if isinstance(template, dict) else None
                if isinstance(spec, dict):
                    specs.append((ref.entry, spec.get("spec")))
        asked = requested_gpus(specs, self.classes, self.all_devices).devices if specs else 0
        by_type: dict[str, list[HeldGpu]] = {}
        for gpu in held:
            by_type.setdefault(gpu.type_id, []).append(gpu)
        # A node with GPUs of two types: each type's limit sees its own GPUs, not all of them under the first.
        found = [claimed_charge(view, self.model, namespace, 0, gpus) for _type, gpus in sorted(by_type.items())]
        found.append(claimed_charge(view, self.model, namespace, asked))
        return [charge for charge in found if charge is not None]

    def _held(self, claim: dict[str, Any] | None, held: list[HeldGpu]) -> bool:
        """Add what `claim` holds to `held`; False when there is no claim or it is not allocated yet."""
        allocated = allocated_gpus(claim, self.devices) if claim is not None else None
        if allocated is None:
            return False
        held.extend(allocated)
        return True


def claimed_charges(model: ClusterModel) -> Iterator[tuple[dict[str, Any], list[PodCharge]]]:
    """Every unfinished pod that asks DRA devices of its own (claims, or devices as extended resources), with
    what those count against quotas (empty for claims that ask no GPU)."""
    claims: ClaimUsage | None = None
    mapped = mapped_resources(model.device_classes)
    for pod in model.pods.values():
        spec = pod.get("spec")
        if not isinstance(spec, dict) or not (spec.get("resourceClaims") or asks_extended_devices(pod, mapped)):
            continue
        if pod_is_finished(pod):
            continue
        claims = claims or ClaimUsage(model, mapped)
        yield pod, claims.charges(pod)


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
    for _pod, claimed in claimed_charges(model):
        charges.extend(claimed)
    return charges
