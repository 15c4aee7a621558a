"""The gang wing at admission: what `/mutate` says about a gang member's room (an after-admission hook), and
who may join a gang's PodGroup (a gate's ownership check). Read-only, from the cluster model.

Admission writes no gang record: a request that no pod follows (refused later, a forged review) must change
nothing, so the leader's gang controller records a gang once it sees its members in the API
(webhook/gangs/controller.py). At the CREATE of a gated member this only warns the user when no NVLink room
of the gang's types suits the pod, or none has space for the gang's members not yet bound now (free GPUs;
promises to other gangs live in the records, which admission does not read).
"""

from __future__ import annotations

from typing import Any

from webhook.admission.facts import Facts, Problem
from webhook.admission.outcome import Outcome
from webhook.admission.request import AdmissionRequest
from webhook.admission.seams import AdmissionGate
from webhook.cluster.model import ClusterModel
from webhook.gang_spec import GATE
from webhook.gangs.accounting import candidate_rooms, constraint_signature, gang_pods
from webhook.gangs.ledger import GangRecord
from webhook.gangs.native import is_kgwe_name, pod_group_name
from webhook.intent import LABEL_GANG
from webhook.placement.free_gpus import free_gpus
from webhook.placement.rooms import best_fit
from webhook.runtime import Runtime

_ADVICE = "gangs.advice"  # in the snapshot's `derived`: `GangAdvice`'s warnings by what they read
_ADVICE_KEPT = 256  # gangs a snapshot remembers the warnings of; past it, the memo starts again


class GangAdvice:
    """The gang warnings of `/mutate`; it writes nothing (its answers are kept with the snapshot)."""

    @staticmethod
    def concerns(facts: Facts) -> bool:
        """Whether `warnings` may say anything of this pod: a gang member KGWE gated."""
        plan = facts.plan
        return facts.intent.gang_size is not None and plan.gang is not None and GATE in plan.scheduling_gates

    def warnings(self, facts: Facts, pod: dict[str, Any]) -> list[str]:
        """Warnings for the user about the gang of the mutated `pod` (none when a room has space now).

        Remembered for the snapshot (every gang member of a workload asks alike) under all they read besides
        it: the namespace, the gang, its size, the member's GPUs, the plan's types and the pod's node
        constraints (`constraint_signature`: all `candidate_rooms` reads of the pod)."""
        if not self.concerns(facts):
            return []
        plan = facts.plan
        size = facts.intent.gang_size
        assert size is not None and plan.gang is not None  # what `concerns` holds
        gpus = facts.demand.whole_gpus  # this member's: the controller sizes the gang by its largest member
        key = (facts.request.namespace, plan.gang, size, gpus, tuple(plan.types), constraint_signature(pod))
        memo: dict[Any, tuple[str, ...]] = facts.model.derived.setdefault(_ADVICE, {})
        found = memo.get(key)
        if found is None:
            if len(memo) >= _ADVICE_KEPT:
                memo.clear()
            found = memo[key] = tuple(_warnings(facts.model, key[0], plan.gang, size, gpus, key[4], pod))
        return list(found)


def _warnings(model: ClusterModel, namespace: str, gang_name: str, size: int, gpus: int, types: tuple[str, ...],
              pod: dict[str, Any]) -> list[str]:
    group = gang_pods(model).get(f"{namespace}/{gang_name}")
    gang = GangRecord(namespace=namespace, gang=gang_name, size=size, gpus_per_pod=gpus, types=types, room=None,
                      created_at=0.0)
    rooms = candidate_rooms(model, gang, [pod])
    if not rooms:
        return [f"kgwe.io/gang {gang_name}: no NVLink room suits it; the pods wait gated (they hold no GPU)"]
    needed = size - (len(group.bound) if group is not None else 0)
    if best_fit(rooms, gpus, needed, free_gpus(model), {}) is None:
        return [f"kgwe.io/gang {gang_name}: no NVLink room has space for the whole gang now; the pods wait "
                "gated (they hold no GPU) until one has"]
    return []


class GangHook:
    """After `/mutate` placed a gang member: the warnings of `GangAdvice` (audit mode gates nothing: none)."""

    def __init__(self, runtime: Runtime, advice: GangAdvice | None = None) -> None:
        self.runtime = runtime
        self.advice = advice or GangAdvice()

    def after_mutate(
        self, request: AdmissionRequest, facts: Facts, outcome: Outcome, deadline: float | None
    ) -> Outcome:
        # The pod is read only for a gang's member: a remembered answer decodes it when first read.
        if self.runtime.config.mode != "audit" and self.advice.concerns(facts) and outcome.object is not None:
            outcome.warnings.extend(self.advice.warnings(facts, outcome.object))
        return outcome


class GangGate(AdmissionGate):
    """Only a gang's members join the PodGroup KGWE makes for it (native gang scheduling)."""

    def output_problems(self, facts: Facts) -> list[Problem]:
        joined = facts.request.pod.pod_group_name
        if not is_kgwe_name(joined):
            # Most pods join no PodGroup of KGWE's: nothing to check, and `renderable` (the plan's conflicts with
            # the pod, a walk of its affinity) is not worked out for them.
            return []
        gang = facts.plan.labels.get(LABEL_GANG) if facts.renderable else None
        if gang is None or joined != pod_group_name(gang):
            # Counted by kube-scheduler towards the gang's minCount, a stranger could start part of a gang.
            return [("output-guard", f"spec.schedulingGroup.podGroupName {joined[:80]} is the PodGroup KGWE "
                                     "makes for a gang: only that gang's members join it (KGWE sets it)")]
        return []
