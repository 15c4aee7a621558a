"""The RBAC gate of `/validate` (SPEC section 4): the requester must be allowed the HardwareProfile the pod
names and, with `rbac.acceleratorTypes`, every accelerator type its plan may place it on.

A SubjectAccessReview may wait on the network: the check is tried on the event loop without waiting first
(a cached review), then run on a gate thread within the request's deadline (webhook/admission/validate.py).
"""

from __future__ import annotations

from policies.rbac.evaluator import Resource
from webhook.admission.facts import Facts, Problem
from webhook.admission.ports import AdmissionPorts
from webhook.admission.request import AdmissionRequest
from webhook.admission.seams import AdmissionGate, Gate


class RbacGate(AdmissionGate):
    """Profile and accelerator-type RBAC for every GPU pod (and every GPU template of a workload)."""

    def __init__(self, ports: AdmissionPorts) -> None:
        self.ports = ports

    def check(self, request: AdmissionRequest, facts: Facts) -> Gate | None:
        if not facts.plan.gpu_pod:
            return None
        return Gate(
            "RBAC", lambda d: self.authorize(request, facts, d), self.ports.access.blocks_io,
            lambda d: self.authorize(request, facts, d, wait=False),
        )

    def authorize(
        self, request: AdmissionRequest, facts: Facts, deadline: float | None, *, wait: bool = True
    ) -> list[Problem]:
        plan = facts.plan
        checks: list[tuple[Resource, str]] = []
        if plan.profile:
            checks.append(("hardwareprofiles", plan.profile))
        if self.ports.config.rbac.accelerator_types:
            checks.extend(("acceleratortypes", type_id) for type_id in plan.types)
        return self.ports.access.may_use(request, facts.model, checks, deadline, wait)
