"""The policy gate: turns one pod's facts into the plain input the policy layer takes, and its answer back.

Policies never import the webhook: the request, the namespace, the cluster summary, the intent and the
tenant are handed over as JSON-like data (`policies.api.PolicyContext`). Placement decisions are cached for
byte-identical pods (the replicas of one workload), by policy set and cluster snapshot.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from policies.api import PolicyContext, Violation
from policies.gpu_demand import GpuDemand
from policies.vocabulary.keys import WORKLOAD
from policies.vocabulary.objects import PodView, pod_view
from webhook.admission.ports import PolicyEngine
from webhook.admission.request import AdmissionRequest
from webhook.cluster.model import ClusterModel
from webhook.intent import PodIntent
from webhook.placement.plan import Decision

DECISION_CACHE_SIZE = 2048
_MISSING = object()


@dataclass
class PolicyGlue:
    """`PolicyGate.evaluate_policies` over the engine `engine()` returns (None: nothing is decided); asked on
    every call, as the runtime's policies are replaced when they are reloaded."""

    engine: Callable[[], PolicyEngine | None]
    _decisions: dict[Any, Any] = field(default_factory=dict, repr=False)

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
            return self._cached_decision(engine, context, model), []
        else:
            return None, list(engine.check(context))
        decision = Decision(dict(placement.fields), dict(placement.decided_by)) if placement.fields else None
        return decision, violations

    def _cached_decision(self, engine: PolicyEngine, context: PolicyContext, model: ClusterModel) -> Decision | None:
        """The placement decision, reused for byte-identical pods (the replicas of one workload).

        A ReplicaSet, Job or StatefulSet creates many pods that reach the mutating webhook identical
        except for the request uid: at mutation time a generated name is not yet set. The decision is a
        pure function of the policy input, so it is cached by that input (with the uid left out of it:
        placement policies see `input.request.uid` as ""), the policy set and the cluster snapshot.
        """
        request = dict(context.request)
        request["uid"] = ""
        context = PolicyContext(request, context.namespace_object, context.cluster, context.intent, context.tenant,
                                context.usage)
        key = (
            engine.generation,
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
            return found  # type: ignore[no-any-return]
        placement = engine.decide_placement(context)
        decision = Decision(dict(placement.fields), dict(placement.decided_by)) if placement.fields else None
        if len(cache) > DECISION_CACHE_SIZE:
            cache.clear()
            cache["key"] = key[:2]
        cache[key[2]] = decision
        return decision


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
