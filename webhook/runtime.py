"""Wiring: the configuration, the cluster store and the policy, quota and RBAC collaborators of admission.

`build_runtime` assembles one `Runtime` for `kgwe serve` and `kgwe review` alike, so the server and the
command line cannot disagree. The runtime also owns the glue that turns webhook facts into the plain
data the policy layer takes (policies never import the webhook).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from prometheus_client import Counter

from policies.api import PolicyContext, Violation, WouldBlock
from policies.gpu_demand import GpuDemand
from policies.kernel.metrics import record_refusal as _record_refusal
from policies.quota.budget import BudgetVerdict, judge
from policies.quota.model import QuotaLimit, quota_limits
from policies.rbac.evaluator import Authorizer, RbacEvaluator, Resource, refusal_message
from policies.runtime.policy_runtime import PolicyRuntime
from policies.vocabulary.keys import WORKLOAD
from policies.vocabulary.objects import PodView, pod_view
from webhook.admission.charging import (
    claim_candidate_types,
    claimed_charge,
    pod_charge,
    tenant_and_quotas,
)
from webhook.admission.facts import Facts
from webhook.admission.request import AdmissionRequest
from webhook.cluster.model import ClusterModel, ClusterStore
from webhook.cluster.workloads import WORKLOAD_KINDS
from webhook.config import Config
from webhook.dra.claim_reader import ClaimReader, ModelClaimReader, read_claims
from webhook.dra.claimed import ForeignClaims, most_devices_on_a_node, own_dra_asks, requested_gpus
from webhook.dra.gpu_classes import GpuClasses
from webhook.gangs.admission import GangAdvice
from webhook.intent import PodIntent
from webhook.placement.plan import Decision
from webhook.quotas.admission import queue_answer, quota_problems
from webhook.quotas.gate import deferred_to_kueue
from webhook.spend.service import BudgetBook, SpendService
from webhook.usage.refresher import UsageRefresher
from webhook.usage.table import UsageTable
from webhook.workloads.admission import WorkloadAwareAdmission

log = logging.getLogger("kgwe.runtime")

DECISION_CACHE_SIZE = 2048
@dataclass(frozen=True)
class _Tenancy:
    tenant: str
    quotas: list[dict[str, Any]]
    limits: list[QuotaLimit]


TENANCY_CACHE_SIZE = 4096  # (namespace, groups) pairs per snapshot; past it the memo starts again
_MISSING = object()

WOULD_MUTATE = Counter("kgwe_would_mutate_total", "Mutations audit mode computed but did not apply, by step", ["step"])


@dataclass
class Runtime:
    config: Config
    store: ClusterStore
    policies: PolicyRuntime | None = None
    authorizer: Authorizer | None = None  # in a cluster: SubjectAccessReviewer; else from the directory
    gangs: GangAdvice | None = None  # gang warnings at /mutate, read-only (webhook.gangs)
    claim_templates: Any | None = None  # in a cluster: webhook.dra.templates.KubeTemplateWriter
    # Reads the claims and templates pods name (webhook/dra/claim_reader.py): the API server in a cluster.
    claim_reader: ClaimReader = field(default_factory=ModelClaimReader)
    admission: WorkloadAwareAdmission = field(init=False)
    _rbac: tuple[int, RbacEvaluator] | None = field(default=None, init=False, repr=False)
    _decisions: dict[Any, Any] = field(default_factory=dict, init=False, repr=False)
    # Per snapshot, by (namespace, groups): the tenant, its TenantQuotas and their limits.
    _tenancy: tuple[int, dict[tuple[str, tuple[str, ...]], _Tenancy]] = field(
        default=(-1, {}), init=False, repr=False
    )
    on_config_change: list[Callable[[Config], None]] = field(default_factory=list)
    decision_events: Any | None = None  # in a cluster: webhook.server.pod_events.DecisionEvents
    # The usage table's background refresh (webhook/usage/refresher.py); None: no usage at admission.
    usage: UsageRefresher | None = None
    # Budget states (SPEC section 12): what admission and the quota controller judge new GPU pods by.
    budgets: BudgetBook = field(init=False)

    def __post_init__(self) -> None:
        self.admission = WorkloadAwareAdmission(self)
        self.budgets = BudgetBook(SpendService(lambda: self.config, self.store.snapshot), lambda: self.config)

    def set_config(self, config: Config) -> None:
        self.config = config
        for listener in self.on_config_change:
            listener(config)

    # -- usage (webhook/usage) ------------------------------------------------------------------
    def usage_table(self) -> UsageTable | None:
        return self.usage.current() if self.usage is not None else None

    # -- tenancy ------------------------------------------------------------------------------
    def tenant_of(self, request: AdmissionRequest, model: ClusterModel) -> str:
        tenant, _quotas = self._tenant_and_quotas(request, model)
        return tenant

    def _tenancy_of(self, request: AdmissionRequest, model: ClusterModel) -> _Tenancy:
        """`tenant_and_quotas` and the quotas' limits, remembered per snapshot, namespace and groups: a
        request asks twice (its tenant, then its quota gate), and one team's pods ask the same all day."""
        generation, cache = self._tenancy  # one tuple: a reader never sees one snapshot's table as another's
        if generation != model.generation or len(cache) >= TENANCY_CACHE_SIZE:
            cache = {}
            self._tenancy = (model.generation, cache)
        key = (request.namespace, tuple(request.user.groups))
        found = cache.get(key)
        if found is None:
            tenant, quotas = tenant_and_quotas(request, model)
            found = cache[key] = _Tenancy(tenant, quotas, [limit for quota in quotas for limit in quota_limits(quota)])
        return found

    def _tenant_and_quotas(self, request: AdmissionRequest, model: ClusterModel) -> tuple[str, list[dict[str, Any]]]:
        found = self._tenancy_of(request, model)
        return found.tenant, list(found.quotas)

    def _quota_limits(self, request: AdmissionRequest, model: ClusterModel) -> list[QuotaLimit]:
        """The limits of the TenantQuotas that apply to the request (`quota_limits` of each, in order)."""
        return self._tenancy_of(request, model).limits

    # -- policies -----------------------------------------------------------------------------
    def _policy_request(self, request: AdmissionRequest, pod: dict[str, Any]) -> dict[str, Any]:
        raw = dict(request.raw)
        raw["object"] = pod
        if request.via:  # decided for who asked (webhook/workloads/identity.py): policies see that user too
            raw["userInfo"] = request.user.as_dict()
        return raw

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
        """The placement decision and/or the admission checks of one pod, in one engine call when both."""
        if self.policies is None or not (decide or check):
            return None, []
        intent_doc = intent.as_policy_input()
        intent_doc["gpus"] = demand.whole_gpus + sum(demand.mig.values())
        intent_doc["inference"] = _is_inference(pod)
        context = PolicyContext(
            request=self._policy_request(request, pod),
            namespace_object=namespace_object,
            cluster=model.summary(),  # the same object per snapshot: engines reload cluster data only on change
            intent=intent_doc,
            tenant=tenant,
            usage=usage,
        )
        violations: list[Violation] = []
        if decide and check:
            placement, violations = self.policies.evaluate(context)
        elif decide:
            return self._cached_decision(context, model), []
        else:
            return None, list(self.policies.check(context))
        decision = Decision(dict(placement.fields), dict(placement.decided_by)) if placement.fields else None
        return decision, violations

    def _cached_decision(self, context: PolicyContext, model: ClusterModel) -> Decision | None:
        """The placement decision, reused for byte-identical pods (the replicas of one workload).

        A ReplicaSet, Job or StatefulSet creates many pods that reach the mutating webhook identical
        except for the request uid: at mutation time a generated name is not yet set. The decision is a
        pure function of the policy input, so it is cached by that input (with the uid left out of it:
        placement policies see `input.request.uid` as ""), the policy set and the cluster snapshot.
        """
        assert self.policies is not None
        request = dict(context.request)
        request["uid"] = ""
        context = PolicyContext(request, context.namespace_object, context.cluster, context.intent, context.tenant,
                                context.usage)
        key = (
            self.policies.generation,
            model.generation,  # the cluster summary is per snapshot
            orjson.dumps(
                [request, context.namespace_object, context.intent, context.tenant, context.usage],
                option=orjson.OPT_SORT_KEYS,
            ),
        )
        cache = self._decisions
        if cache.get("key") != key[:2]:
            cache.clear()
            cache["key"] = key[:2]
        found = cache.get(key[2], _MISSING)
        if found is not _MISSING:
            return found  # type: ignore[return-value]
        placement = self.policies.decide_placement(context)
        decision = Decision(dict(placement.fields), dict(placement.decided_by)) if placement.fields else None
        if len(cache) > DECISION_CACHE_SIZE:
            cache.clear()
            cache["key"] = key[:2]
        cache[key[2]] = decision
        return decision

    # -- RBAC ---------------------------------------------------------------------------------
    @property
    def rbac_blocks_io(self) -> bool:
        """Whether an RBAC check may wait on the network (a SubjectAccessReview), not only on memory."""
        return self.authorizer is not None

    def _authorizer(self, model: ClusterModel) -> Authorizer:
        if self.authorizer is not None:
            return self.authorizer
        cached = self._rbac
        if cached is None or cached[0] != model.generation:
            evaluator = RbacEvaluator(obj for objects in model.rbac.values() for obj in objects)
            self._rbac = cached = (model.generation, evaluator)
        return cached[1]

    def authorize(
        self, request: AdmissionRequest, facts: Facts, deadline: float | None, *, wait: bool = True
    ) -> list[tuple[str, str]]:
        plan = facts.plan
        checks: list[tuple[Resource, str]] = []
        if plan.profile:
            checks.append(("hardwareprofiles", plan.profile))
        if self.config.rbac.accelerator_types:
            checks.extend(("acceleratortypes", type_id) for type_id in plan.types)
        return self._may_use(request, facts.model, checks, deadline, wait)

    def _may_use(
        self, request: AdmissionRequest, model: ClusterModel, checks: list[tuple[Resource, str]],
        deadline: float | None, wait: bool,
    ) -> list[tuple[str, str]]:
        if not checks:
            return []
        authorizer = self._authorizer(model)
        user = request.user.as_dict()
        problems: list[tuple[str, str]] = []
        for resource, name in checks:
            try:
                allowed = authorizer.can_use(user, resource, name, request.namespace, deadline=deadline, wait=wait)
            except WouldBlock:
                raise  # asked not to wait: the caller asks again where it may
            except Exception as exc:  # the authorizer's failure (timeout, API down): never an admission
                log.warning("RBAC check for %s/%s failed: %s", resource, name, exc)
                problems.append(("rbac", f"could not check RBAC for {resource}.kgwe.io/{name} ({exc}); try again"))
                continue
            if not allowed:
                problems.append(("rbac", refusal_message(user, resource, name)))
        return problems

    # -- quotas (webhook/quotas) ------------------------------------------------------------------
    def _quota_applies(
        self, request: AdmissionRequest, model: ClusterModel, *, templates: bool = False
    ) -> _Tenancy | None:
        """The tenancy when the quota gate holds this request's pods: a pod (or, with `templates`, a workload's
        pod template) of a tenant with a TenantQuota, in a namespace not deferred to Kueue; else None."""
        if request.template and not templates:
            return None
        tenancy = self._tenancy_of(request, model)
        if not tenancy.quotas or deferred_to_kueue(self.config, model.namespace_labels(request.namespace)):
            return None
        return tenancy

    def quota_gated(self, request: AdmissionRequest, facts: Facts) -> bool:
        asks_gpu = facts.plan.gpu_pod or bool(own_dra_asks(facts.pod, facts.plan.dra, facts.model.device_classes))
        # A workload's templates carry the gate too, so that their pods pass /mutate unchanged (SPEC section 7).
        gated = self._quota_applies(request, facts.model, templates=True) is not None
        return asks_gpu and (request.operation == "CREATE" or request.template) and gated

    def check_quota(
        self, request: AdmissionRequest, facts: Facts, deadline: float | None, *, wait: bool = True
    ) -> list[tuple[str, str]]:
        if not facts.plan.gpu_pod:
            return []
        tenancy = self._quota_applies(request, facts.model)
        if tenancy is None or request.object is None:
            return []
        charge = pod_charge(facts.request.pod, facts.model, facts)
        intent = facts.intent
        gang_size = intent.gang_size if intent.gang and intent.gang_size else None
        return quota_problems(
            request.object, charge, tenancy.tenant, tenancy.limits, facts.model, self.config, gang_size=gang_size
        )

    def quota_warnings(self, request: AdmissionRequest, facts: Facts) -> list[str]:
        if self.config.quotas.over_quota == "refuse" or request.object is None:
            return []
        tenancy = self._quota_applies(request, facts.model)
        if tenancy is None:
            return []
        answer = queue_answer(facts.model, self.config, request.object)
        if answer is None or not answer.startswith("would wait"):
            return []
        return [f"KGWE: this pod {answer}; it starts by itself when quota frees (docs/quotas.md)"]

    def budget_verdict(self, request: AdmissionRequest, facts: Facts) -> BudgetVerdict:
        """What the tenant's budget says of a new GPU pod (policies/quota/budget.py): `Queue` holds it behind
        the quota gate only where the gate applies; elsewhere (Kueue's namespaces) it is a warning."""
        if request.template or request.operation != "CREATE" or not facts.plan.gpu_pod:
            return BudgetVerdict("allow", None, None)
        tenancy = self._tenancy_of(request, facts.model)
        if not tenancy.quotas:
            return BudgetVerdict("allow", None, None)
        verdict = judge(self.budgets.states().get(tenancy.tenant))
        if verdict.effect == "queue" and self._quota_applies(request, facts.model) is None:
            return BudgetVerdict("allow", verdict.warning, None)
        return verdict

    # -- GPUs through the pod's own ResourceClaims --------------------------------------------
    @property
    def claims_block_io(self) -> bool:
        return bool(self.claim_reader.blocks_io) or self.rbac_blocks_io

    def check_claims(
        self, request: AdmissionRequest, facts: Facts, claims: ForeignClaims, deadline: float | None,
        *, wait: bool = True,
    ) -> list[tuple[str, str]]:
        """Refusals for a pod that names ResourceClaims of its own (webhook/dra/claimed.py): what they ask
        is read, and GPUs there pass the accelerator-type RBAC and the quota like `nvidia.com/gpu` does."""
        if claims.problems:
            return [("invalid", p) for p in claims.problems]
        model = facts.model
        tenancy = self._quota_applies(request, model)
        charged = tenancy is not None
        if not (charged or self.config.rbac.accelerator_types or facts.plan.gpu_pod):
            # Nothing here depends on what the claims ask: no read (a template created after its pod, as
            # Helm orders unknown kinds, is then no refusal).
            return []
        if wait is False and self.claim_reader.blocks_io:
            raise WouldBlock("the pod's ResourceClaims are read from the API server")
        read = read_claims(self.claim_reader, request.namespace, claims.refs, model, deadline)
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
        types = claim_candidate_types(model)
        if self.config.rbac.accelerator_types:
            # The claim may be given any of these types: the requester must be allowed each.
            problems = self._may_use(request, model, [("acceleratortypes", t) for t in types], deadline, wait)
            if problems:
                return problems
        charge = claimed_charge(request.pod, model, request.namespace, asked.devices)
        if tenancy is None or charge is None or request.object is None:
            return []
        return quota_problems(request.object, charge, tenancy.tenant, tenancy.limits, model, self.config)

    # -- metrics ------------------------------------------------------------------------------
    def record_refusal(self, reason: str) -> None:
        _record_refusal(reason)

    def record_would_mutate(self, steps: list[str]) -> None:
        for step in steps:
            WOULD_MUTATE.labels(step=step).inc()


def _is_inference(pod: PodView | Mapping[str, Any]) -> bool:
    """`kgwe.io/workload: inference` as a label or an annotation (built-in policies may pick a MIG slice)."""
    view = pod_view(pod)
    return any((value or "").lower() == "inference" for value in (view.label(WORKLOAD), view.annotation(WORKLOAD)))


def build_runtime(
    config: Config,
    cluster_dir: str | Path | None,
    *,
    store: ClusterStore | None = None,
    authorizer: Authorizer | None = None,
    load_policies: bool = True,
) -> Runtime:
    """Assemble a runtime. With `cluster_dir` the YAML directory is loaded now; otherwise the caller
    attaches an API source to `runtime.store` (see `kgwe serve`)."""
    store = store or ClusterStore(
        config.accelerator_table(), config.topology_staleness_seconds, config.gpu_taint_keys,
        workload_kinds=[*WORKLOAD_KINDS, *(k.kind for k in config.workloads.kinds)],
    )
    if cluster_dir is not None:
        from webhook.cluster.yaml_source import YamlDirectorySource

        YamlDirectorySource(cluster_dir, store).load()
    runtime = Runtime(config=config, store=store, authorizer=authorizer)
    runtime.gangs = GangAdvice()
    if load_policies:
        runtime.policies = _load_policies(config, store)
    return runtime


def _load_policies(config: Config, store: ClusterStore) -> PolicyRuntime:
    from policies.runtime.policy_runtime import build_runtime as build_policy_runtime

    policy_runtime = build_policy_runtime(
        rego_engine=config.policies.rego_engine,
        opa_url=config.policies.opa_url,
        failure_mode=config.policies.failure_mode,
        # `off` in the configuration or in KGWE_REGO_VM turns the compiled VM off.
        rego_vm="off" if config.policies.rego_vm == "off" else None,
    )
    report = policy_runtime.reload(
        builtin=config.policies.builtin,
        directories=list(config.policies.directories),
        gpu_policies=list(store.snapshot().gpu_policies.values()),
    )
    for name, error in report.errors.items():
        log.error("policy %s refused: %s", name, error)
    return policy_runtime
