"""The ports of the admission core: what it needs from the rest of KGWE, as typed Protocols.

`AdmissionService` (webhook/admission/core.py) is written against these, not against the runtime
that assembles them (webhook/runtime.py), so the core imports nothing above it and has no import
cycle with its wiring. Each gate is a port of its own:

- `PolicyGate`: the policy layer's placement decision and admission checks for one pod (memory only;
  an OPA server is reached within the request's deadline by the policy runtime itself);
- `RbacGate`: may the requester use the profile and accelerator types the plan names (may wait on a
  SubjectAccessReview: `rbac_blocks_io` tells the core to run it off the event loop);
- `QuotaGate`: which pods wait behind the `kgwe.io/quota` gate, and what `/validate` refuses for quota
  (memory only: KGWE's controller, not the request, releases pods when their quota holds them).

The gates are synchronous callables; the core first asks a blocking one not to wait (`wait=False`: a
cached review, a free lock), and only when that cannot answer runs it on its gate thread pool within the
request's deadline, so a slow API server never holds the event loop and a fast answer costs no thread.
"""

from __future__ import annotations

from typing import Any, Protocol

from policies.api import PlacementDecision, PolicyContext, Violation
from policies.gpu_demand import GpuDemand
from policies.quota.budget import BudgetVerdict
from webhook.admission.facts import Facts, Problem
from webhook.admission.request import AdmissionRequest
from webhook.cluster.model import ClusterModel, ClusterStore
from webhook.config import Config
from webhook.dra.claimed import ForeignClaims
from webhook.dra.templates import TemplateWriter
from webhook.gangs.admission import GangAdvice
from webhook.intent import PodIntent
from webhook.placement.plan import Decision
from webhook.usage.table import UsageTable


class PolicyEngine(Protocol):
    """The policy layer as admission calls it (`policies.runtime.PolicyRuntime` implements it)."""

    @property
    def generation(self) -> int:
        """Changes whenever the policy set (or the engine's health) changes: decisions cached under an
        older generation are stale."""
        ...

    def check(self, ctx: PolicyContext) -> list[Violation]: ...

    def decide_placement(self, ctx: PolicyContext) -> PlacementDecision: ...

    def evaluate(self, ctx: PolicyContext) -> tuple[PlacementDecision, list[Violation]]: ...


class PolicyGate(Protocol):
    """Policies decide: the placement decision and/or the violations of one pod."""

    @property
    def policies(self) -> PolicyEngine | None:
        """None when no policies are loaded (`kgwe review --no-policies`, some tests): nothing is decided."""
        ...

    def evaluate_policies(
        self,
        request: AdmissionRequest,
        pod: dict[str, Any],
        intent: PodIntent,
        demand: GpuDemand,
        namespace_object: dict[str, Any] | None,
        model: ClusterModel,
        tenant: str,
        *,
        decide: bool,
        check: bool,
        usage: dict[str, Any] | None = None,
    ) -> tuple[Decision | None, list[Violation]]:
        """The decision (when `decide`) and the violations (when `check`), in one engine call when both;
        `usage` is the pod's workload usage (policies' `input.kgwe.usage` and CEL `usage`).
        Raises `policies.runtime.PolicyEngineError` when the engine fails and fails closed."""
        ...


class RbacGate(Protocol):
    """Profile and accelerator-type RBAC (SPEC section 4)."""

    @property
    def rbac_blocks_io(self) -> bool:
        """True when a check may wait on the network (a SubjectAccessReview), not only on memory."""
        ...

    def authorize(
        self, request: AdmissionRequest, facts: Facts, deadline: float | None, *, wait: bool = True
    ) -> list[Problem]:
        """The refusals (reason `rbac`); an authorizer that fails is a refusal, never an admission. With
        `wait=False`, raises `policies.api.WouldBlock` when the answer needs the network."""
        ...


class QuotaGate(Protocol):
    """Tenant quotas (SPEC section 10): the pods the `kgwe.io/quota` gate holds, and what `/validate` refuses.
    Memory only: no reservation, no write, no network (webhook/quotas)."""

    def quota_gated(self, request: AdmissionRequest, facts: Facts) -> bool:
        """`/mutate` adds the `kgwe.io/quota` scheduling gate to this pod."""
        ...

    def check_quota(
        self, request: AdmissionRequest, facts: Facts, deadline: float | None, *, wait: bool = True
    ) -> list[Problem]:
        """The refusals (reason `quota`): no gate, `spec.nodeName` set, an ask no limit could ever hold, or
        (`quotas.overQuota: refuse`) an ask that would wait now."""
        ...

    def quota_warnings(self, request: AdmissionRequest, facts: Facts) -> list[str]:
        """Why an admitted pod will wait for its tenant's quota (shown to whoever creates it), if it will."""
        ...

    def budget_verdict(self, request: AdmissionRequest, facts: Facts) -> BudgetVerdict:
        """What the tenant's budget says of a new GPU pod: allow (maybe with a warning), deny or queue (memory
        only: the last budget states read, never a wait for Prometheus)."""
        ...


class ClaimGate(Protocol):
    """GPUs a pod asks through ResourceClaims of its own (SPEC section 9): read, then RBAC and quota."""

    @property
    def claims_block_io(self) -> bool:
        """True when reading the claims, or the RBAC and quota checks after it, may wait on the network."""
        ...

    def check_claims(
        self, request: AdmissionRequest, facts: Facts, claims: ForeignClaims, deadline: float | None,
        *, wait: bool = True,
    ) -> list[Problem]:
        """The refusals; a claim that cannot be read is a refusal, never an admission. With `wait=False`,
        raises `policies.api.WouldBlock` when the answer needs the network or a held lock."""
        ...


class UsageGate(Protocol):
    """What GPUs do (SPEC section 11): the usage table the background refresh keeps (webhook/usage/refresher.py).
    Memory only: the request path never reads Prometheus."""

    def usage_table(self) -> UsageTable | None:
        """The current table; None without Prometheus, before the first refresh, or once it is stale."""
        ...


class AdmissionPorts(PolicyGate, RbacGate, QuotaGate, ClaimGate, UsageGate, Protocol):
    """Everything the admission core reads: configuration, the cluster, the gates and two metrics."""

    @property
    def config(self) -> Config: ...

    @property
    def store(self) -> ClusterStore: ...

    @property
    def gangs(self) -> GangAdvice | None:
        """Warns at `/mutate` when no NVLink room has space for a member's gang (webhook/gangs); reads the model
        only, writes nothing. None: no gang warnings."""
        ...

    @property
    def claim_templates(self) -> TemplateWriter | None:
        """Creates DRA ResourceClaimTemplates in a cluster (webhook/dra/templates.py); None offline."""
        ...

    def tenant_of(self, request: AdmissionRequest, model: ClusterModel) -> str:
        """The requester's tenant for the request's namespace (webhook/admission/charging.py)."""
        ...

    def record_refusal(self, reason: str) -> None: ...

    def record_would_mutate(self, steps: list[str]) -> None: ...
