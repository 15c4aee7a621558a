"""What pods hold or ask through DRA claims of their own, as quota charges (SPEC section 9).

Allocated claims charge the devices they hold, by type; claims not yet allocated (and DRA devices asked as
extended resources) charge each device as one whole GPU of every type a claim may get. Read by the claims
gate at admission (webhook/dra/gate.py) and by the quota usage (webhook/quota_charges.py).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from decimal import Decimal
from typing import Any

from policies.quota.model import PodCharge
from policies.vocabulary.accelerator_types import MIXED
from policies.vocabulary.keys import QUOTA_GATE
from policies.vocabulary.objects import PodView, pod_view
from policies.vocabulary.quantities import GIB
from webhook.claim_names import extended_claim_name, generated_claim_names
from webhook.cluster.claim_charging import HeldGpu
from webhook.cluster.device_classes import asks_extended_devices, mapped_resources
from webhook.cluster.model import ClusterModel, pod_is_finished
from webhook.dra.claimed import (
    allocated_gpus,
    devices_by_key,
    extended_requests,
    foreign_claims,
    most_devices_on_a_node,
    own_dra_asks,
    recorded_by_kgwe,
    requested_gpus,
)
from webhook.dra.gpu_classes import GpuClasses
from webhook.dra.holders import claim_holders as claim_holders  # the seam's part (cluster/claim_charging.py)
from webhook.dra_rendering import DraRendering
from webhook.intent import OUT_TENANT


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
        namespace_labels=model.namespace_labels(namespace, shared=True),
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


def claim_charges(model: ClusterModel, mapped: Mapping[str, str]) -> ClaimUsage:
    """The snapshot's claims ready to charge pods: the quota wing's seam (webhook/cluster/claim_charging.py)."""
    return ClaimUsage(model, mapped)


def asks_own_devices(
    pod: Mapping[str, Any], rendering: DraRendering | None, device_classes: Mapping[str, Mapping[str, Any]]
) -> bool:
    """At admission: whether the pod asks DRA for devices of its own, past what KGWE rendered for it."""
    return bool(own_dra_asks(pod, rendering, device_classes))
