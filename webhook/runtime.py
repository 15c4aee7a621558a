"""The runtime: the bundle of ports the admission core reads (webhook/admission/ports.py).

It holds the configuration, the cluster store and the policy engine, and fills each port with the core
module that owns it: tenancy (admission/tenancy.py), policies (admission/policy_glue.py), RBAC
(admission/access.py), the usage table (webhook/usage). It knows no wing: the assembly
(webhook/assembly.py `build_runtime`) builds it and registers the wings' kinds, gates and hooks on
`runtime.admission.seams`, and sets the wing state below that a wing reads and the core never does.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from policies.kernel.metric_kinds import counter
from policies.kernel.metrics import record_refusal as _record_refusal
from policies.rbac.evaluator import Authorizer
from policies.runtime.policy_runtime import PolicyRuntime
from webhook.admission.access import Access
from webhook.admission.core import AdmissionService
from webhook.admission.facts import UsageRow
from webhook.admission.policy_glue import PolicyGlue
from webhook.admission.ports import UsageSource
from webhook.admission.request import AdmissionRequest
from webhook.admission.tenancy import Tenancy, TenancyMemo
from webhook.cluster.model import ClusterModel, ClusterStore
from webhook.config import Config

WOULD_MUTATE = counter("kgwe_would_mutate_total", "Mutations audit mode computed but did not apply, by step", ["step"])


@dataclass
class Runtime:
    config: Config
    store: ClusterStore
    policies: PolicyRuntime | None = None
    authorizer: Authorizer | None = None  # in a cluster: SubjectAccessReviewer; else from the directory
    on_config_change: list[Callable[[Config], None]] = field(default_factory=list)
    decision_events: Any | None = None  # in a cluster: webhook.server.pod_events.DecisionEvents
    # The usage table's background refresh (webhook/usage/refresher.py); None: no usage at admission.
    usage: UsageSource | None = None
    # Wing state, set by the assembly (and tests), read by the wing's own gates and hooks only:
    claim_templates: Any | None = None  # webhook/dra/templates.py TemplateWriter; None offline
    claim_reader: Any | None = None  # webhook/dra/claim_reader.py ClaimReader; None: the cluster model's
    budgets: Any = None  # webhook/spend/service.py BudgetBook (SPEC section 12), for the quota gate
    admission: AdmissionService = field(init=False)
    access: Access = field(init=False)
    policy_glue: PolicyGlue = field(init=False)
    tenancy: TenancyMemo = field(default_factory=TenancyMemo, init=False, repr=False)

    def __post_init__(self) -> None:
        self.access = Access(lambda: self.authorizer)
        self.policy_glue = PolicyGlue(lambda: self.policies)
        self.admission = AdmissionService(self)  # no seams until the assembly registers the wings'

    def set_config(self, config: Config) -> None:
        self.config = config
        for listener in self.on_config_change:
            listener(config)

    # -- tenancy (webhook/admission/tenancy.py) -------------------------------------------------
    def tenancy_of(self, request: AdmissionRequest, model: ClusterModel) -> Tenancy:
        return self.tenancy.of(request, model)

    def tenant_of(self, request: AdmissionRequest, model: ClusterModel) -> str:
        return self.tenancy.of(request, model).tenant

    # -- usage (webhook/usage) ------------------------------------------------------------------
    def workload_usage(self, request: AdmissionRequest, pod: dict[str, Any]) -> UsageRow | None:
        """The pod's workload's row of the usage table (memory only), None without one."""
        return self.usage.workload_usage(request, pod) if self.usage is not None else None

    # -- metrics ------------------------------------------------------------------------------
    def record_refusal(self, reason: str) -> None:
        _record_refusal(reason)

    def record_would_mutate(self, steps: list[str]) -> None:
        for step in steps:
            WOULD_MUTATE.labels(step=step).inc()
