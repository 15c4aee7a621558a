"""The ports of the admission core: what it needs from the rest of KGWE, as typed Protocols.

`AdmissionService` (webhook/admission/core.py) is written against these, not against the runtime
that assembles them (webhook/runtime.py), so the core imports nothing above it and has no import
cycle with its wiring:

- `PolicyGate`: the policy layer's placement decision and admission checks for one pod (memory only;
  an OPA server is reached within the request's deadline by the policy runtime itself);
- `UsageGate`: the usage row of the pod's workload (memory only);
- `AdmissionPorts.access`: may the requester use a profile or an accelerator type (may wait on a
  SubjectAccessReview: `blocks_io` tells a gate to run off the event loop);
- `QuotaCheck`: quota for GPUs one gate finds, answered by another (claims asked, quota charged).

The wings' gates (RBAC, quota, DRA claims) are `AdmissionGate`s of webhook/admission/seams.py. A gate's
check is a synchronous callable; the core first asks a blocking one not to wait (`wait=False`: a cached
review, a free lock), and only when that cannot answer runs it on its gate thread pool within the
request's deadline, so a slow API server never holds the event loop and a fast answer costs no thread.
"""

from __future__ import annotations

from typing import Any, Protocol

from policies.quota.model import PodCharge
from webhook.admission.access import Access
from webhook.admission.facts import Problem, UsageRow
from webhook.admission.policy_glue import PolicyEngine, PolicyGlue
from webhook.admission.request import AdmissionRequest
from webhook.admission.tenancy import Tenancy
from webhook.cluster.model import ClusterModel, ClusterStore
from webhook.config import Config


class PolicyGate(Protocol):
    """Policies decide: the placement decision and/or the violations of one pod."""

    @property
    def policies(self) -> PolicyEngine | None:
        """None when no policies are loaded (`kgwe review --no-policies`, some tests): nothing is decided."""
        ...

    @property
    def policy_glue(self) -> PolicyGlue:
        """`evaluate_policies`: the decision (when `decide`) and the violations (when `check`) of one pod, in one
        engine call when both; raises `policies.runtime.PolicyEngineError` when the engine fails and fails
        closed."""
        ...


class QuotaCheck(Protocol):
    """Quota for GPUs a gate finds past the pod's resources (the claims gate, webhook/dra/gate.py), asked of the
    quota gate (webhook/quotas/gate.py) through the core, so that neither wing imports the other."""

    def charged_tenancy(self, request: AdmissionRequest, model: ClusterModel) -> Tenancy | None:
        """The tenancy when the quota gate holds this request's pods; None when no quota applies."""
        ...

    def charge_problems(
        self, request: AdmissionRequest, charge: PodCharge, tenancy: Tenancy, model: ClusterModel
    ) -> list[Problem]:
        """The refusals (reason `quota`) of `charge` against the tenant's limits."""
        ...


class UsageSource(Protocol):
    """Where the usage table lives (webhook/usage/refresher.py `UsageRefresher`, filled by `kgwe serve`)."""

    def workload_usage(self, request: AdmissionRequest, pod: dict[str, Any]) -> UsageRow | None:
        """The row of the pod's workload in the current table; None without one, or when the table is missing
        or stale."""
        ...


class UsageGate(Protocol):
    """What GPUs do (SPEC section 11): the usage table the background refresh keeps (webhook/usage/refresher.py).
    Memory only: the request path never reads Prometheus."""

    def workload_usage(self, request: AdmissionRequest, pod: dict[str, Any]) -> UsageRow | None:
        """The row of the pod's workload; None without Prometheus, before the first refresh, once it is stale,
        or without a row."""
        ...


class AdmissionPorts(PolicyGate, UsageGate, Protocol):
    """Everything the admission core reads: configuration, the cluster, the policies, RBAC, tenancy and two
    metrics. The wings' gates and hooks come through `AdmissionSeams` (seams.py)."""

    @property
    def config(self) -> Config: ...

    @property
    def store(self) -> ClusterStore: ...

    @property
    def access(self) -> Access:
        """May the requester use a profile or an accelerator type (webhook/admission/access.py)."""
        ...

    def tenancy_of(self, request: AdmissionRequest, model: ClusterModel) -> Tenancy:
        """The requester's tenant and quotas for the request's namespace (webhook/admission/tenancy.py)."""
        ...

    def tenant_of(self, request: AdmissionRequest, model: ClusterModel) -> str: ...

    def record_refusal(self, reason: str) -> None: ...

    def record_would_mutate(self, steps: list[str]) -> None: ...
