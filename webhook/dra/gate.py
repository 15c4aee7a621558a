"""The claims gate of `/validate` (SPEC section 9): GPUs a pod asks through ResourceClaims of its own.

Their specs are read (from the API server in a cluster: webhook/dra/claim_reader.py), and GPUs there pass
the accelerator-type RBAC and the tenant's quota as `nvidia.com/gpu` does. It runs first among the gates: a
pod that asks GPUs both ways is refused before any quota is judged for it. A claim that cannot be read is a
refusal, never an admission.
"""

from __future__ import annotations

from policies.api import WouldBlock
from policies.rbac.evaluator import Resource
from webhook.admission.facts import Facts, Problem
from webhook.admission.ports import QuotaCheck
from webhook.admission.request import AdmissionRequest
from webhook.admission.seams import AdmissionGate, Gate
from webhook.cluster.device_classes import asks_extended_devices
from webhook.dra.charges import claim_candidate_types, claimed_charge
from webhook.dra.claim_reader import ClaimReader, ModelClaimReader, read_claims
from webhook.dra.claimed import ForeignClaims, GpuClasses, most_devices_on_a_node, own_dra_asks, requested_gpus
from webhook.runtime import Runtime

_OFFLINE = ModelClaimReader()


class ClaimGate(AdmissionGate):
    """Reads a pod's own claims, then judges their GPUs by RBAC and quota (`quota`: the quota gate)."""

    judges_rewrites = False  # rightsizing rewrites `nvidia.com/gpu`, never a pod's claims

    def __init__(self, runtime: Runtime, quota: QuotaCheck) -> None:
        self.runtime = runtime
        self.quota = quota

    @property
    def reader(self) -> ClaimReader:
        reader: ClaimReader | None = self.runtime.claim_reader  # in a cluster: the API server (the assembly)
        return reader if reader is not None else _OFFLINE

    def check(self, request: AdmissionRequest, facts: Facts) -> Gate | None:
        if request.template:
            return None
        claims = _own_asks(facts) if request.object is facts.pod else own_dra_asks(
            request.pod, facts.plan.dra, facts.model.device_classes)
        if not claims:
            return None
        blocks = bool(self.reader.blocks_io) or self.runtime.access.blocks_io
        return Gate(
            "DRA claims", lambda d: self.check_claims(request, facts, claims, d), blocks,
            lambda d: self.check_claims(request, facts, claims, d, wait=False),
        )

    def fails_closed(self, request: AdmissionRequest) -> bool:
        # Claims of its own, or DRA devices as extended resources, may be GPUs.
        return bool(request.pod.spec.get("resourceClaims") or asks_extended_devices(request.pod))

    def asks_devices(self, facts: Facts) -> bool:
        asks = _own_asks(facts)
        return bool(asks.refs or asks.extended)

    def check_claims(
        self, request: AdmissionRequest, facts: Facts, claims: ForeignClaims, deadline: float | None,
        *, wait: bool = True,
    ) -> list[Problem]:
        """Refusals for a pod that names ResourceClaims of its own (webhook/dra/claimed.py): what they ask
        is read, and GPUs there pass the accelerator-type RBAC and the quota like `nvidia.com/gpu` does."""
        if claims.problems:
            return [("invalid", p) for p in claims.problems]
        model = facts.model
        config = self.runtime.config
        tenancy = self.quota.charged_tenancy(request, model)
        if not (tenancy is not None or config.rbac.accelerator_types or facts.plan.gpu_pod):
            # Nothing here depends on what the claims ask: no read (a template created after its pod, as
            # Helm orders unknown kinds, is then no refusal).
            return []
        reader = self.reader
        if wait is False and reader.blocks_io:
            raise WouldBlock("the pod's ResourceClaims are read from the API server")
        read = read_claims(reader, request.namespace, claims.refs, model, deadline)
        if read.refusal is not None:
            return [("dra-claims", read.refusal)]
        specs, awaited = [*read.specs, *claims.extended], read.awaited  # and DRA devices as extended resources
        classes, all_devices = GpuClasses(model.device_classes), most_devices_on_a_node(model)
        asked = requested_gpus(specs, classes, all_devices)
        if asked.problems:
            return [("invalid", p) for p in asked.problems]
        if not asked.devices:
            return []
        for what, spec in awaited:
            if requested_gpus([(what, spec)], classes, all_devices).devices:
                return [("dra-claims", f"{what} asks for GPUs, but it is the gang's ComputeDomain channel "
                                       "template, which NVIDIA's ComputeDomain controller writes with an IMEX "
                                       "channel only; it was written by someone else: an administrator must "
                                       "delete it")]
        if facts.plan.gpu_pod:
            return [("dra-claims", "this pod asks for GPUs both as resources (nvidia.com/gpu, MIG) and through "
                                   f"its own ResourceClaims ({', '.join(sorted(asked.classes))}); ask one way")]
        if config.rbac.accelerator_types:
            # The claim may be given any of these types: the requester must be allowed each.
            checks: list[tuple[Resource, str]] = [("acceleratortypes", t) for t in claim_candidate_types(model)]
            problems = self.runtime.access.may_use(request, model, checks, deadline, wait)
            if problems:
                return problems
        charge = claimed_charge(request.pod, model, request.namespace, asked.devices)
        if tenancy is None or charge is None or request.object is None:
            return []
        return self.quota.charge_problems(request, charge, tenancy, model)


_ASKS_NOTHING = "dra.asks-nothing"


def _own_asks(facts: Facts) -> ForeignClaims:
    """`own_dra_asks` of the pod of `facts`. It reads the pod's spec (its claims, its containers' resources), the
    plan's DRA rendering and the snapshot's DeviceClasses, never the pod's identity: whether it finds nothing is
    remembered per plan memo entry, found on the entry's own pod (without its identity) as
    webhook/admission/replicas.py does, and replicas of a pod that asks nothing skip it. What it finds is always
    found again on the pod itself."""
    entry = facts.plan_memo
    if entry is None or not isinstance(entry.pod.raw, dict):
        return own_dra_asks(facts.pod, facts.plan.dra, facts.model.device_classes)
    nothing = entry.derived.get(_ASKS_NOTHING)
    if nothing is None:
        nothing = entry.derived[_ASKS_NOTHING] = not own_dra_asks(entry.pod, entry.plan.dra, facts.model.device_classes)
    return ForeignClaims() if nothing else own_dra_asks(facts.pod, facts.plan.dra, facts.model.device_classes)
