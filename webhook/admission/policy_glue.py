"""The policy gate: turns one pod's facts into the plain input the policy layer takes, and its answer back.

Policies never import the webhook: the request, the namespace, the cluster summary, the intent and the
tenant are handed over as JSON-like data (`policies.api.PolicyContext`). A placement decision is asked of
the engine every time: a cache of decisions for byte-identical pods bought 0-3 % for replicas (the engine's
own answer memo serves them) and cost 6 % for distinct pods (docs/performance.md, issue 34).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from policies.api import PlacementDecision, PolicyContext, Violation
from policies.gpu_demand import GpuDemand
from policies.vocabulary.keys import WORKLOAD
from policies.vocabulary.objects import PodView, pod_view
from webhook.admission.request import AdmissionRequest
from webhook.cluster.model import ClusterModel
from webhook.intent import PodIntent
from webhook.placement.plan import Decision


class PolicyEngine(Protocol):
    """The policy layer as admission calls it (`policies.runtime.PolicyRuntime` implements it)."""

    def check(self, ctx: PolicyContext) -> list[Violation]: ...

    def decide_placement(self, ctx: PolicyContext) -> PlacementDecision: ...

    def evaluate(self, ctx: PolicyContext) -> tuple[PlacementDecision, list[Violation]]: ...


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
        intent_doc = intent.as_policy_input()
        intent_doc["gpus"] = demand.whole_gpus + sum(demand.mig.values())
        intent_doc["inference"] = _is_inference(pod)
        context = PolicyContext(
            request=_policy_request(request, pod),
            namespace_object=namespace_object,
            cluster=model.summary(),  # the same object per snapshot: engines reload cluster data only on change
            intent=intent_doc,
            tenant=tenant,
            usage=usage,
        )
        violations: list[Violation] = []
        if decide and check:
            placement, violations = engine.evaluate(context)
        elif decide:
            # Placement policies see `input.request.uid` as "": a replica's decision cannot depend on it.
            context = PolicyContext({**context.request, "uid": ""}, context.namespace_object, context.cluster,
                                    context.intent, context.tenant, context.usage)
            placement = engine.decide_placement(context)
        else:
            return None, list(engine.check(context))
        decision = Decision(dict(placement.fields), dict(placement.decided_by)) if placement.fields else None
        return decision, violations


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
