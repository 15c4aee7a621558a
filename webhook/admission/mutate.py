"""Mutate: the patch `/mutate` answers for a pod (decode -> gather -> **render the patch** -> respond).

CREATE: the placement plan and KGWE's outputs rendered by the mutation steps (webhook/mutation/) into one
JSON Patch, DRA claim templates written (a gang's record is not: the gang controller records gangs from the pods
that exist); UPDATE: `kgwe.io/` keys restored.
Audit mode reports what would change and changes nothing.

A controller's replicas reach `/mutate` alike but for the request's uid (no name yet: the API server names a
generateName pod after admission), and so do the API server's reinvocations. Their answer after the facts is
remembered with the plan (`answer_slot`), under everything it reads; the facts themselves, the wings' hooks
and audit mode's counters are still worked out for every request (the policies' decision is shared between
replicas by the policy glue, under its own exact key: webhook/admission/policy_glue.py `evaluate_for_pod`).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, replace
from operator import is_
from typing import Any

import orjson

from policies.api import WouldBlock
from policies.gpu_demand import GpuDemand
from policies.vocabulary.identity import identity_of
from policies.vocabulary.objects import ObjectView
from webhook.admission.facts import Facts, Problem
from webhook.admission.gather import FactGathering
from webhook.admission.kept_outcome import KeptOutcome
from webhook.admission.outcome import Outcome
from webhook.admission.ownership import expected_outputs, restore_kgwe_keys_step
from webhook.admission.request import AdmissionRequest
from webhook.admission.rightsizing import Advice, advise, mode_of, not_applied, rightsized_pod, rightsizing_step
from webhook.admission.seams import AdmissionGate
from webhook.cluster.model import ClusterModel
from webhook.config import Config
from webhook.intent import LABEL_GANG
from webhook.mutation.pipeline import NotConverging, copy_json, run_pipeline
from webhook.mutation.steps import (
    Outputs,
    output_annotations_step,
    output_labels_step,
    placement_steps,
    profile_steps,
    scheduling_gates_step,
    scheduling_group_step,
)
from webhook.placement.memo import MAX_KEY_BYTES, PodReading, read_pod
from webhook.placement.plan import PlacementPlan
from webhook.placement.profile_resources import ProfileResources, missing_defaults, profile_resources, write_defaults

log = logging.getLogger("kgwe.admission")

_PROFILES = "mutate.profiles"  # in the snapshot's `derived`: HardwareProfile name -> `_profile`'s answer


class Mutation(FactGathering):
    """The mutating flow of the admission core."""

    def mutate(self, request: AdmissionRequest, deadline: float | None = None) -> Outcome:
        """The mutating answer; `AdmissionService` sends the kinds other than Pod to their handlers first."""
        return self.mutate_pod(request, deadline)

    def mutate_pod(self, request: AdmissionRequest, deadline: float | None = None) -> Outcome:
        """A pod's mutating answer (a kind handler's pods too: a workload's templates as pods)."""
        screened = self._screen(request)
        if screened is not None:
            return screened
        assert request.object is not None
        if request.operation == "UPDATE":
            return self._mutate_update(request)
        model, config = self.runtime.store.snapshot(), self.runtime.config
        reading = read_pod(request.pod, model)
        profile = self._profile(reading.intent.profile, model)
        facts = self.gather(request, self._defaulted(request.object, profile, reading.demand), deadline,
                            reading=reading)
        if facts.intent.out_of_bounds and config.mode != "audit":
            return refuse_out_of_bounds(request, facts.intent.out_of_bounds)
        slot = answer_slot(request, reading, facts, model, config, self.seams.gates)
        if slot is not None and slot.answer is not None:
            found = slot.answer
            return self._finish(request, facts, found.outcome(facts.plan), found.renderable, found.reported, deadline)
        advice, facts = self._rightsize(request, facts, deadline)
        steps = self._steps(facts)
        if profile is not None and facts.renderable:
            # A refused pod is never half-rewritten (docs/placement.md): no defaults without a placement.
            steps[:0] = profile_steps(profile)
        if advice.rewrites:
            steps.insert(0, rightsizing_step(advice.changes))
        try:
            result = run_pipeline(request.object, steps)
        except NotConverging as exc:
            log.error("pod %s/%s: %s", request.namespace, request.name or "(generated)", exc)
            return Outcome(warnings=[f"KGWE could not compute a stable mutation: {exc}"], object=request.object)
        outcome = Outcome(patch=result.patch, object=result.pod,
                          warnings=facts.intent.warnings + facts.plan.warnings + advice.warnings)
        outcome.plan = facts.plan  # for the pod's Event (why), written off the request path
        # Reported by what was decided (accelerator, mig, nvlink, cost, ...), not by internal step names.
        reported = list(facts.plan.steps) if facts.renderable else []
        if advice.rewrites:
            reported.insert(0, "rightsizing")
        if {"gpu-resources", "profile-queue"} & set(result.changed_steps) and "profile" not in reported:
            reported.append("profile")
        if "output-annotations" in result.changed_steps and not reported:
            reported.append("attribution")
        if slot is not None and not advice.tried:  # a rewrite is judged by gates that may ask the API
            slot.keep(outcome, facts.renderable, reported)
        return self._finish(request, facts, outcome, facts.renderable, reported, deadline)

    def _finish(self, request: AdmissionRequest, facts: Facts, outcome: Outcome, renderable: bool,
                reported: Sequence[str], deadline: float | None) -> Outcome:
        """What every answer does per request, remembered or not: the wings' hooks and audit mode's report."""
        if renderable:  # the wings' hooks (gang warnings, DRA claim templates) see placed pods only
            for hook in self.seams.after:
                outcome = hook.after_mutate(request, facts, outcome, deadline)
        if self.runtime.config.mode == "audit":
            assert request.object is not None
            return self._audit_only(outcome, list(reported), request.object)
        return outcome

    @staticmethod
    def _profile(name: str | None, model: ClusterModel) -> ProfileResources | None:
        """The resources and queue of the HardwareProfile the pod names (`name`, its intent's), None when it names
        none (or one that does not exist: placement refuses that) or the profile says nothing of them. Read once
        per snapshot and profile (a pure function of the profile's spec; the value is immutable)."""
        spec = model.hardware_profiles.get(name) if name else None
        if name is None or spec is None:
            return None
        known: dict[str, ProfileResources | None] = model.derived.setdefault(_PROFILES, {})
        if name not in known:
            profile = profile_resources(name, ObjectView(spec).spec)
            known[name] = None if profile.empty else profile
        return known[name]

    @staticmethod
    def _defaulted(pod: dict[str, Any], profile: ProfileResources | None, demand: GpuDemand) -> dict[str, Any]:
        """The pod as the profile's defaults leave it, so that placement, policies and quota judge the GPUs
        it will ask for (the same defaults are written by the first steps of the pipeline); `demand` is the pod's."""
        missing = missing_defaults(pod, profile, demand) if profile is not None else None
        if not missing:
            return pod
        candidate = copy_json(pod)
        write_defaults(candidate, missing)  # what `apply_defaults` writes: the copy is the pod's equal
        return candidate

    def _rightsize(self, request: AdmissionRequest, facts: Facts, deadline: float | None) -> tuple[Advice, Facts]:
        """`rightsizing.mode` for this pod (webhook/admission/rightsizing.py): its advice, and the facts of
        the pod rewritten by `auto` when the rewritten pod would pass (else the warning says why not)."""
        if facts.usage is None or request.operation != "CREATE":
            return Advice(), facts
        settings = self.runtime.config.rightsizing
        notes = request.pod.annotations
        mode = mode_of(settings, facts.model.namespace_labels(request.namespace), notes)
        advice = advise(mode, facts.usage, notes, facts.intent, facts.demand, settings,
                        decided_by_template=request.made_from_template)
        if not advice.rewrites:
            return advice, facts
        candidate = copy_json(facts.pod)
        rightsized_pod(candidate, advice.changes)
        trial = self.gather(request, candidate, deadline, with_checks=True)
        problem = self._rightsizing_blocked(request, trial)
        if problem is not None:
            return Advice(not_applied(facts.usage, problem), tried=True), facts
        return replace(advice, tried=True), trial

    def _rightsizing_blocked(self, request: AdmissionRequest, trial: Facts) -> str | None:
        """Why the rewritten pod would be refused (placement, a Deny policy, RBAC, quota), if it would: then
        `auto` keeps what was asked rather than turn an admitted pod into a refused one."""
        if not trial.renderable:
            reasons = trial.plan.refusals or trial.conflicts or trial.intent.problems
            return "it cannot be placed (" + "; ".join(str(r) for r in reasons[:2]) + ")"
        denied = [v for v in trial.violations if v.action == "Deny"]
        if denied:
            return f"policy {denied[0].policy} denies it"
        try:
            # The gates judge the pod as /mutate would leave it (quota: its quota gate included).
            made = run_pipeline(trial.pod, self._steps(trial)).pod
            as_made = replace(request, object=made)
            # Not the trial's plan memo entry: it holds the pod before the pipeline, and a gate that remembers its
            # answer there (the quota gate's refusals) would judge that pod instead of this one.
            made_facts = replace(trial, request=as_made, pod=made, plan_memo=None)
            problems: list[Problem] = []
            for gate in self.seams.gates:
                check = gate.check(as_made, made_facts) if gate.judges_rewrites else None
                if check is not None and not problems:
                    problems = (check.try_now or check.run)(None)
        except WouldBlock:
            return "RBAC or quota could not be checked without waiting"
        except NotConverging as exc:
            return str(exc)
        return problems[0][1] if problems else None

    def _steps(self, facts: Facts) -> list[Any]:
        outputs = expected_outputs(facts)
        steps = [
            output_annotations_step(Outputs(outputs)),
            # The gang label groups pods for co-location: only KGWE's plan may set it.
            output_labels_step({LABEL_GANG: facts.plan.labels.get(LABEL_GANG) if facts.renderable else None}),
        ]
        # Each gate's owner lifts it (the quota controller: webhook/quotas).
        gates = [g for gate in self.seams.gates for g in gate.scheduling_gates(facts.request, facts)]
        if facts.renderable:
            steps.extend(placement_steps(facts.plan, gates))
            if facts.plan.scheduling_group and not facts.request.template:
                # A pod's only: a workload's template keeps none (LeaderWorkerSet, for one, refuses it there).
                steps.append(scheduling_group_step(facts.plan.scheduling_group))
        elif gates:
            steps.append(scheduling_gates_step(gates))
        return steps

    def _mutate_update(self, request: AdmissionRequest) -> Outcome:
        """`kgwe.io/` keys are fixed at creation, like a pod's resources: restore them from the old object.

        KGWE's own controllers may change its output keys (the accelerator type after binding), never
        the user's intent.
        """
        assert request.object is not None
        step = restore_kgwe_keys_step(request.old_pod, outputs_too=not self._is_controller(request))
        try:
            result = run_pipeline(request.object, [step])
        except NotConverging as exc:  # pragma: no cover - one fixed step always converges
            return Outcome(warnings=[str(exc)], object=request.object)
        outcome = Outcome(patch=result.patch, object=result.pod)
        if result.patch:
            outcome.warnings.append("kgwe.io/ annotations and labels are fixed at creation; your change was undone")
        if self.runtime.config.mode == "audit":
            return self._audit_only(outcome, ["output-guard"], request.object)
        return outcome

    def _audit_only(self, outcome: Outcome, steps: list[str], original: dict[str, Any]) -> Outcome:
        if outcome.patch:
            self.runtime.record_would_mutate(steps)
            outcome.warnings.append(f"KGWE audit mode: would mutate ({', '.join(steps)}); no change made")
            outcome.audit_annotations["would-mutate"] = ",".join(steps)
        outcome.patch = []
        outcome.object = original
        return outcome


def refuse_out_of_bounds(request: AdmissionRequest, problems: list[str]) -> Outcome:
    """An intent past an input bound: refused by `/mutate` in the words and with the code `/validate` uses
    (422, Invalid), instead of an `allowed` answer whose patch stores outputs for a pod that cannot pass."""
    outcome = Outcome.deny("; ".join(dict.fromkeys(problems)), code=422, reason="Invalid")
    outcome.object = request.object
    return outcome


# A pod's answer remembered for replicas: see `answer_slot`.
_ANSWERS = "mutate.answers"
_ANSWER_BYTES = "mutate.answer-bytes"  # in the snapshot's `derived`: what its entries' answers hold, keys included
_ANSWERS_PER_ENTRY = 8
MAX_ANSWER_BYTES = 8 * 1024 * 1024  # per snapshot; past it, answers are no longer kept until the next one


@dataclass(frozen=True, slots=True)
class RememberedAnswer:
    """What `/mutate` answered a pod before the wings' hooks, as immutable values: the patch and the mutated pod
    as JSON bytes (None: not kept), the patch as the AdmissionResponse carries it (base64 of those bytes), the
    warnings, whether the pod was placed, and audit mode's report."""

    patch: bytes | None
    pod: bytes | None
    encoded: str
    warnings: tuple[str, ...]
    renderable: bool
    reported: tuple[str, ...]

    @classmethod
    def of(cls, outcome: Outcome, renderable: bool, reported: Sequence[str]) -> RememberedAnswer:
        """The answer of `outcome`; its patch and pod kept only where their bytes give them back exactly (a
        value JSON cannot hold, or a tuple where the bytes say list, is not)."""
        patch: bytes | None
        pod: bytes | None
        try:
            patch, pod = orjson.dumps(outcome.patch), orjson.dumps(outcome.object)
        except TypeError:
            patch = pod = None
        if patch is None or pod is None or orjson.loads(patch) != outcome.patch or orjson.loads(pod) != outcome.object:
            patch = pod = None
        encoded = outcome.encoded_patch() if patch is not None else ""
        return cls(patch, pod, encoded, tuple(outcome.warnings), renderable, tuple(reported))

    def outcome(self, plan: PlacementPlan) -> Outcome:
        """A fresh `Outcome` of this answer (nothing shared with the memo or another request), for `plan`'s Event;
        its patch and pod are decoded when first read (webhook/admission/kept_outcome.py)."""
        assert self.patch is not None and self.pod is not None
        return KeptOutcome(self.patch, self.pod, self.encoded, list(self.warnings), plan)


@dataclass(slots=True)
class AnswerSlot:
    """Where one request's answer is remembered (`answer_slot`), and what it found there."""

    answers: dict[tuple[bytes, bytes], _Kept | None]
    key: tuple[bytes, bytes]
    usage: Any
    gates: tuple[AdmissionGate, ...]
    tenant: str
    answer: RememberedAnswer | None
    held: list[int]  # the snapshot's `_ANSWER_BYTES`

    def keep(self, outcome: Outcome, renderable: bool, reported: Sequence[str]) -> None:
        """Remembers the answer `outcome` (before the hooks) from the second request with this key on (the first
        is only marked: a pod with a name of its own is sent once, the replicas of a workload, named by the API
        server after admission, all alike), within `MAX_ANSWER_BYTES` a snapshot."""
        seen = self.key in self.answers
        answer = RememberedAnswer.of(outcome, renderable, reported) if seen else _MARK
        if answer.patch is None or answer.pod is None:
            return
        size = len(self.key[0]) + len(self.key[1])
        if seen:
            size += len(answer.patch) + len(answer.pod) + len(answer.encoded)
        if self.held[0] + size > MAX_ANSWER_BYTES:
            return
        if len(self.answers) >= _ANSWERS_PER_ENTRY and not seen:
            self.answers.clear()  # what they held stays counted: the bound is on what a snapshot ever kept
        self.held[0] += size
        self.answers[self.key] = _Kept(self.usage, self.gates, self.tenant, answer) if seen else None


_MARK = RememberedAnswer(b"", b"", "", (), False, ())  # a key seen once: nothing of its answer is kept


@dataclass(frozen=True, slots=True)
class _Kept:
    usage: Any
    gates: tuple[AdmissionGate, ...]
    tenant: str
    answer: RememberedAnswer


def answer_slot(request: AdmissionRequest, reading: PodReading, facts: Facts, model: ClusterModel, config: Config,
                gates: list[AdmissionGate]) -> AnswerSlot | None:
    """Where `/mutate`'s answer to this pod CREATE is remembered, with the answer when one is; None when it is not
    remembered.

    The answer after the facts (rightsizing's advice, the steps, the pipeline's patch, the warnings) reads only
    the request, the facts, the snapshot, the configuration and the gates' `scheduling_gates`, which are
    functions of the request and the facts. The facts hold the plan of a plan memo entry (webhook/placement/
    memo.py): one snapshot and configuration, one policy decision, intent and GPU demand, one pod without its
    identity. So the answer is kept in that entry, under the exact JSON of the request less its uid (the pod's
    own bytes, as `read_pod` made them, and everything else the request holds), and found again only where the
    tenant, the usage row (by identity: the table is replaced when refreshed) and the gates are the ones it was
    computed with. The policy decision is part of the entry's key, not remembered here (the policy glue shares it
    between replicas under a key of its own). What is done per request stays per request (`Mutation._finish`): the
    hooks, audit mode's counters; the endpoint's metrics and the pod's Event are the endpoint's."""
    entry = facts.plan_memo
    if (entry is None or entry.config is not config or facts.model is not model or reading.body is None
            or request.operation != "CREATE"):
        return None
    received = request.raw.copy()  # then less what the key leaves out: in the order received, as a comprehension
    for left_out in _LEFT_OUT_OF_RAW:  # keeps it, at a third of its cost
        received.pop(left_out, None)
    try:
        rest = orjson.dumps([
            identity_of(request.object), request.kind, request.resource, request.namespace, request.name,
            request.user.as_dict(), request.old_object, request.dry_run, request.api_version, request.sub_resource,
            request.invalid, request.authenticated, request.template, request.requested_by, request.via,
            request.workload, request.made_from_template,
            received,
        ])
    except TypeError:
        return None
    if len(rest) > MAX_KEY_BYTES:
        return None
    answers: dict[tuple[bytes, bytes], _Kept | None] = entry.derived.setdefault(_ANSWERS, {})
    key = (reading.body, rest)
    kept = answers.get(key)
    usage, asked = facts.usage, tuple(gates)
    found = None
    if (kept is not None and kept.usage is usage and kept.tenant == facts.tenant and len(kept.gates) == len(asked)
            and all(map(is_, kept.gates, asked))):  # the same gates, by identity (lengths checked first)
        found = kept.answer
    return AnswerSlot(answers, key, usage, asked, facts.tenant, found, model.derived.setdefault(_ANSWER_BYTES, [0]))


# What the key leaves out of the request as received: its objects, keyed as decoded (or as a hook rewrote them),
# and the uid, which tells two sendings of one pod apart and which nothing of the answer reads.
_LEFT_OUT_OF_RAW = frozenset({"uid", "object", "oldObject"})
