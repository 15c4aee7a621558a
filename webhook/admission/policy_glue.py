"""The policy gate: turns one pod's facts into the plain input the policy layer takes, and its answer back.

Policies never import the webhook: the request, the namespace, the cluster summary, the intent and the
tenant are handed over as JSON-like data (`policies.api.PolicyContext`). A replica (a pod alike but for its
identity) is handed the answer an earlier replica got in the same snapshot (`evaluate_for_pod`): `/validate`'s
checks and `/mutate`'s decision alone, each under its own key, the `read_pod` bytes the plan memo already computed,
while the engine says that key holds all its answer reads (docs/decisions.md, "The policies' answer shared between
a pod's replicas at admission" and "/mutate shares a replica's placement decision too").
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import orjson

from policies.api import PlacementDecision, PolicyContext, Violation
from policies.gpu_demand import GpuDemand
from policies.vocabulary.keys import WORKLOAD
from policies.vocabulary.objects import PodView, pod_view
from webhook.admission.request import AdmissionRequest
from webhook.cluster.model import ClusterModel
from webhook.intent import PodIntent
from webhook.placement.memo import PlanMemoEntry, PodReading
from webhook.placement.plan import Decision


class PolicyEngine(Protocol):
    """The policy layer as admission calls it (`policies.runtime.PolicyRuntime` implements it)."""

    def check(self, ctx: PolicyContext) -> list[Violation]: ...

    def decide_placement(self, ctx: PolicyContext) -> PlacementDecision: ...

    def evaluate(self, ctx: PolicyContext) -> tuple[PlacementDecision, list[Violation]]: ...

    def evaluate_for_replicas(self, ctx: PolicyContext) -> tuple[PlacementDecision, list[Violation], object | None]: ...

    def replica_token(self) -> object | None: ...

    def check_for_replicas(self, ctx: PolicyContext) -> tuple[list[Violation], object | None]: ...

    def decide_for_replicas(self, ctx: PolicyContext) -> tuple[PlacementDecision, object | None]: ...

    def count_remembered(self, violations: list[Violation], seconds: float, kind: str) -> None: ...


@dataclass
class PolicyGlue:
    """The policy gate (webhook/admission/ports.py `PolicyGate.policy_glue`) over the engine `engine()` returns
    (None: nothing is decided); asked on every call, as the runtime's policies are replaced when reloaded."""

    engine: Callable[[], PolicyEngine | None]

    @property
    def policies(self) -> PolicyEngine | None:
        return self.engine()

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
        engine = self.policies
        if engine is None or not (decide or check):
            return None, []
        context = _context(request, pod, intent, demand, namespace_object, model, tenant, usage)
        violations: list[Violation] = []
        if decide and check:
            placement, violations = engine.evaluate(context)
        elif decide:
            placement = engine.decide_placement(_without_uid(context))
        else:
            return None, list(engine.check(context))
        return _copied(placement) if placement.fields else None, violations

    def evaluate_for_pod(
        self,
        request: AdmissionRequest,
        pod: dict[str, Any],
        reading: PodReading,
        namespace_object: dict[str, Any] | None,
        model: ClusterModel,
        tenant: str,
        usage: dict[str, Any] | None,
        *,
        decide: bool,
        check: bool = True,
    ) -> tuple[Decision | None, list[Violation], ReplicaAnswer | None]:
        """`evaluate_policies(request, pod, reading.intent, reading.demand, ..., decide=decide, check=check)`
        for a pod whose `read_pod` is `reading` (the request's own, as its profile's defaults leave it, or a
        rightsizing rewrite of it); the answer remembered for this snapshot's replicas while the engine says its
        answers depend only on the pod without its identity, the namespace object, the intent document and the
        usage (`replica_token`, policies/runtime/memo_keys.py), as its own answer memo does. The key holds each
        of those exactly: the reading's bytes (the pod without its identity, of which the intent and demand are
        functions), the namespace's name (its object is the snapshot's), the usage's JSON, and what was asked (a
        decision alone, as `/mutate` asks it, is not the answer of the checks). Also the entry the answer came
        from (None when not remembered)."""
        started = time.perf_counter()
        engine = self.policies
        if engine is None or not (decide or check):
            return None, [], None
        asked = "evaluate" if decide and check else "decide" if decide else "check"
        key = _replica_key(reading, request.namespace, usage, asked)
        token = engine.replica_token() if key is not None else None
        answers: dict[ReplicaKey, ReplicaAnswer] = model.derived.setdefault(_ANSWERS, {})
        found = answers.get(key) if key is not None and token is not None else None
        if found is not None and found.token is token:
            violations = list(found.violations)
            engine.count_remembered(violations, time.perf_counter() - started, asked)
            known = found.decision
            return (None if known is None else _copied(known)), violations, found
        context = _context(request, pod, reading.intent, reading.demand, namespace_object, model, tenant, usage)
        decision: Decision | None = None
        violations = []
        if check:
            if decide:
                placement, violations, shared = engine.evaluate_for_replicas(context)
            else:
                violations, shared = engine.check_for_replicas(context)
        else:
            placement, shared = engine.decide_for_replicas(_without_uid(context))
        if decide:
            decision = _copied(placement) if placement.fields else None
        if key is None or shared is None or shared is not token:
            return decision, violations, None
        if len(answers) >= REPLICA_ANSWERS_SIZE:
            answers.clear()
        kept = None if decision is None else _copied(decision)
        entry = answers[key] = ReplicaAnswer(shared, kept, tuple(violations))
        return decision, violations, entry


REPLICA_ANSWERS_SIZE = 256
_ANSWERS = "admission.policy-answers"
ReplicaKey = tuple[bytes, str, bytes | None, str]


@dataclass(slots=True)
class ReplicaAnswer:
    """The policies' answer for a pod without its identity in one namespace with one usage, in one snapshot
    (`evaluate_for_pod`), under the policy set `token`; and the plan memo entry gather found for it (the plan
    depends on the pod, its intent, demand and decision, the snapshot and the configuration: set once, read
    only while its configuration is the runtime's)."""

    token: object
    decision: Decision | None
    violations: tuple[Violation, ...]
    plan: PlanMemoEntry | None = None


def _replica_key(reading: PodReading, namespace: str, usage: dict[str, Any] | None, asked: str
                 ) -> ReplicaKey | None:
    if reading.body is None:
        return None
    try:
        used = None if usage is None else orjson.dumps(usage)
    except TypeError:
        return None
    return (reading.body, namespace, used, asked)


def _copied(decision: PlacementDecision | Decision) -> Decision:
    """A decision of its own (a remembered one is never handed out)."""
    return Decision(dict(decision.fields), dict(decision.decided_by))


def _without_uid(context: PolicyContext) -> PolicyContext:
    """Placement policies see `input.request.uid` as "": a replica's decision cannot depend on it."""
    return PolicyContext({**context.request, "uid": ""}, context.namespace_object, context.cluster, context.intent,
                         context.tenant, context.usage)


def _context(request: AdmissionRequest, pod: dict[str, Any], intent: PodIntent, demand: GpuDemand,
             namespace_object: dict[str, Any] | None, model: ClusterModel, tenant: str,
             usage: dict[str, Any] | None) -> PolicyContext:
    intent_doc = intent.as_policy_input()
    intent_doc["gpus"] = demand.whole_gpus + sum(demand.mig.values())
    intent_doc["inference"] = _is_inference(pod)
    return PolicyContext(
        request=_policy_request(request, pod),
        namespace_object=namespace_object,
        cluster=model.summary(),  # the same object per snapshot: engines reload cluster data only on change
        intent=intent_doc,
        tenant=tenant,
        usage=usage,
    )


def _policy_request(request: AdmissionRequest, pod: dict[str, Any]) -> dict[str, Any]:
    raw = dict(request.raw)
    raw["object"] = pod
    if request.via:  # decided for who asked (webhook/workloads/identity.py): policies see that user too
        raw["userInfo"] = request.user.as_dict()
    return raw


def _is_inference(pod: PodView | Mapping[str, Any]) -> bool:
    """`kgwe.io/workload: inference` as a label or an annotation (built-in policies may pick a MIG slice)."""
    view = pod_view(pod)
    return any((value or "").lower() == "inference" for value in (view.label(WORKLOAD), view.annotation(WORKLOAD)))
