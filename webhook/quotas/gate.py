"""The quota gate of admission (SPEC section 10): which pods `/mutate` holds behind `kgwe.io/quota`, what
`/validate` refuses for quota, and what a tenant's budget says of a new GPU pod (SPEC section 12).

Memory only: no reservation, no write, no network. KGWE's quota controller, not the request, releases the
pods it holds (webhook/quotas/controller.py). It also answers the claims gate's quota question
(`QuotaCheck`: GPUs asked through DRA claims of the pod's own).
"""

from __future__ import annotations

from typing import Any

from policies.quota.budget import BudgetVerdict, judge
from policies.quota.model import PodCharge, QuotaLimit
from policies.vocabulary.objects import PodView
from webhook.admission.facts import Facts, Problem
from webhook.admission.request import AdmissionRequest
from webhook.admission.seams import AdmissionGate, Gate
from webhook.admission.tenancy import Tenancy
from webhook.cluster.claim_charging import CLAIM_CHARGING
from webhook.cluster.model import ClusterModel
from webhook.placement.memo import PlanMemoEntry
from webhook.quota_charges import pod_charge
from webhook.quotas.admission import answer_ignores_identity, queue_answer, quota_problems
from webhook.quotas.scheduling_gate import QUOTA_GATE, deferred_to_kueue
from webhook.runtime import Runtime

# Their keys in a plan memo entry's `derived` (webhook/placement/memo.py).
_QUEUE_ANSWER = "quota.queue_answer"
_QUOTA_PROBLEMS = "quota.problems"  # by tenant and limits: the same pod may be sent by several tenants
_TENANCIES_PER_ENTRY = 8
_ALLOW = BudgetVerdict("allow", None, None)  # frozen: one shared


class QuotaGate(AdmissionGate):
    """Tenant quotas and budgets at admission, over the runtime's tenancy memo and budget book."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime

    def _applies(self, request: AdmissionRequest, model: ClusterModel, *, templates: bool = False,
                 tenancy: Tenancy | None = None) -> Tenancy | None:
        """The tenancy when the quota gate holds this request's pods: a pod (or, with `templates`, a workload's
        pod template) of a tenant with a TenantQuota, in a namespace not deferred to Kueue; else None. `tenancy`:
        the request's, when known already (`_tenancy`)."""
        if request.template and not templates:
            return None
        if tenancy is None:
            tenancy = self.runtime.tenancy_of(request, model)
        return tenancy if self._holds(request, tenancy, model) else None

    def _holds(self, request: AdmissionRequest, tenancy: Tenancy, model: ClusterModel) -> bool:
        """Whether the gate holds the pods of `tenancy`, under the configuration of the moment."""
        return bool(tenancy.quotas) and not deferred_to_kueue(
            self.runtime.config, model.namespace_labels(request.namespace))

    def _tenancy(self, request: AdmissionRequest, facts: Facts) -> Tenancy:
        """The request's tenancy: the one gather found for the facts' own request in the facts' snapshot (a
        function of the request's namespace and groups and the snapshot: admission never changes a request's
        namespace or user in place, a changed requester is a new request), where `/validate` asked it three times
        more."""
        tenancy = facts.tenancy if facts.request is request else None
        return tenancy if tenancy is not None else self.runtime.tenancy_of(request, facts.model)

    def _held(self, request: AdmissionRequest, facts: Facts) -> Tenancy | None:
        """`_applies(request, facts.model)` with the tenancy `_tenancy` knows."""
        if request.template:
            return None
        return self._applies(request, facts.model, tenancy=self._tenancy(request, facts))

    def scheduling_gates(self, request: AdmissionRequest, facts: Facts) -> list[str]:
        asks_gpu = facts.plan.gpu_pod or CLAIM_CHARGING.value.asks_own_devices(
            facts.pod, facts.plan.dra, facts.model.device_classes)
        # A workload's templates carry the gate too, so that their pods pass /mutate unchanged (SPEC section 7).
        gated = self._applies(request, facts.model, templates=True, tenancy=self._tenancy(request, facts)) is not None
        return [QUOTA_GATE] if asks_gpu and (request.operation == "CREATE" or request.template) and gated else []

    def advise(self, request: AdmissionRequest, facts: Facts) -> tuple[list[Problem], list[str]]:
        warnings = self._warnings(request, facts)
        budget = self._budget(request, facts)
        if budget.effect == "deny" and budget.reason:
            return [("budget", budget.reason)], warnings
        if budget.warning:
            warnings.append(f"KGWE: {budget.warning}")
        return [], warnings

    def check(self, request: AdmissionRequest, facts: Facts) -> Gate | None:
        if not facts.plan.gpu_pod or request.template:  # a workload's templates are charged by their pods
            return None
        # Memory only (no reservation, nothing written): the quota controller decides when it starts.
        return Gate("quota", lambda d: self.check_quota(request, facts), False)

    def check_quota(self, request: AdmissionRequest, facts: Facts) -> list[Problem]:
        """The refusals (reason `quota`): no gate, `spec.nodeName` set, an ask no limit could ever hold, or
        (`quotas.overQuota: refuse`) an ask that would wait now."""
        tenancy = self._held(request, facts)
        if tenancy is None or request.object is None:
            return []
        entry = self._replica_entry(request.object, facts)
        # With `overQuota: refuse` the answer is the queue's, which looks the pod up by its name: not memoised.
        if entry is None or self.runtime.config.quotas.over_quota == "refuse":
            return self._quota_problems(request.object, facts.request.pod, tenancy, facts)
        # Computed once per remembered plan and tenancy on the pod without its identity: what the refusals
        # read of a pod is its spec, namespace and annotations, of the plan its types and GPU-equivalents.
        # Kept by tenant, with the limits they hold for: a key of the limits would hash every frozen QuotaLimit
        # on every request, where comparing a snapshot's own limits is one identity test each.
        memo: dict[str, tuple[tuple[QuotaLimit, ...], tuple[Problem, ...]]] = entry.derived.setdefault(
            _QUOTA_PROBLEMS, {})
        limits = tuple(tenancy.limits)
        kept = memo.get(tenancy.tenant)
        if kept is not None and kept[0] == limits:
            return list(kept[1])
        if len(memo) >= _TENANCIES_PER_ENTRY:
            memo.clear()
        own = entry.pod.raw
        assert isinstance(own, dict)
        found = tuple(self._quota_problems(own, entry.pod, tenancy, facts))
        memo[tenancy.tenant] = (limits, found)
        return list(found)

    def _quota_problems(self, pod: dict[str, Any], view: PodView, tenancy: Tenancy, facts: Facts) -> list[Problem]:
        charge = pod_charge(view, facts.model, facts)
        intent = facts.intent
        gang_size = intent.gang_size if intent.gang and intent.gang_size else None
        return quota_problems(
            pod, charge, tenancy.tenant, tenancy.limits, facts.model, self.runtime.config, gang_size=gang_size,
        )

    def _replica_entry(self, pod: dict[str, Any], facts: Facts) -> PlanMemoEntry | None:
        """The plan memo entry of this pod (webhook/placement/memo.py: one snapshot, one configuration, one pod
        without its identity, its intent, demand and decision) when answers for the replicas of a workload may
        be kept in it; None when the plan was not remembered for this very pod."""
        entry = facts.plan_memo
        if entry is None or entry.config is not self.runtime.config or facts.pod is not pod:
            return None
        return entry if isinstance(entry.pod.raw, dict) else None

    def _warnings(self, request: AdmissionRequest, facts: Facts) -> list[str]:
        """Why an admitted pod will wait for its tenant's quota (shown to whoever creates it), if it will."""
        config = self.runtime.config
        if config.quotas.over_quota == "refuse" or request.object is None:
            return []
        if self._held(request, facts) is None:
            return []
        answer = self._queue_answer(request.object, facts)
        if answer is None or not answer.startswith("would wait"):
            return []
        return [f"KGWE: this pod {answer}; it starts by itself when quota frees (docs/quotas.md)"]

    def _queue_answer(self, pod: dict[str, Any], facts: Facts) -> str | None:
        """`queue_answer` of the pod, computed once per plan memo entry for the replicas of a workload, on the
        pod without its identity, where that is the pod's own answer (`answer_ignores_identity`)."""
        config = self.runtime.config
        entry = self._replica_entry(pod, facts)
        if entry is None or not answer_ignores_identity(pod, facts.demand.asks_gpu, facts.model):
            return queue_answer(facts.model, config, pod)
        if _QUEUE_ANSWER not in entry.derived:
            own = entry.pod.raw
            assert isinstance(own, dict)
            entry.derived[_QUEUE_ANSWER] = queue_answer(facts.model, config, own)
        found: str | None = entry.derived[_QUEUE_ANSWER]
        return found

    def _budget(self, request: AdmissionRequest, facts: Facts) -> BudgetVerdict:
        """What the tenant's budget says of a new GPU pod (policies/quota/budget.py): `Queue` holds it behind
        the quota gate only where the gate applies; elsewhere (Kueue's namespaces) it is a warning. Memory
        only: the last budget states read, never a wait for Prometheus."""
        if request.template or request.operation != "CREATE" or not facts.plan.gpu_pod:
            return _ALLOW
        tenancy = self._tenancy(request, facts)
        if not tenancy.quotas or self.runtime.budgets is None:
            return _ALLOW
        verdict = judge(self.runtime.budgets.states().get(tenancy.tenant))
        if verdict.effect == "queue" and not self._holds(request, tenancy, facts.model):
            return BudgetVerdict("allow", verdict.warning, None)
        return verdict

    # -- QuotaCheck: the claims gate's quota (webhook/dra/gate.py) -------------------------------
    def charged_tenancy(self, request: AdmissionRequest, model: ClusterModel) -> Tenancy | None:
        return self._applies(request, model)

    def charge_problems(
        self, request: AdmissionRequest, charge: PodCharge, tenancy: Tenancy, model: ClusterModel
    ) -> list[Problem]:
        if request.object is None:
            return []
        return quota_problems(request.object, charge, tenancy.tenant, tenancy.limits, model, self.runtime.config)
