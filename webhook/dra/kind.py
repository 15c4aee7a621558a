"""The DRA wing's kind handler: a ResourceClaim or ResourceClaimTemplate CREATE is judged at `/validate` by
webhook/dra/claim_guard.py (a claim or template a pod waits for, docs/dra.md); `/mutate` leaves it as it came.
"""

from __future__ import annotations

from webhook.admission.outcome import Outcome
from webhook.admission.request import AdmissionRequest
from webhook.admission.seams import PendingVerdict, PodFlow
from webhook.dra.claim_guard import is_claim_create, judge_claim_create
from webhook.runtime import Runtime


class ClaimKind:
    """ResourceClaim and ResourceClaimTemplate CREATEs (any version of resource.k8s.io)."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime

    def judges(self, request: AdmissionRequest) -> bool:
        return is_claim_create(request) and request.invalid is None

    def mutate(self, request: AdmissionRequest, deadline: float | None, pods: PodFlow) -> Outcome:
        return pods.mutate_pod(request, deadline)  # not a pod: passed as it came

    def prepare_verdict(
        self, request: AdmissionRequest, deadline: float | None, pods: PodFlow
    ) -> Outcome | PendingVerdict:
        return judge_claim_create(request, self.runtime.store.snapshot(), self.runtime.config.mode == "audit")
