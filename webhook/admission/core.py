"""The admission core: review in, outcome out. No HTTP here; the server and `kgwe review` both call it.

Data flows one way: decode (done by the caller) → gather facts (cluster snapshot, intent, tenant) →
policies decide (placement decision, admission checks) → plan → render patch (mutate) or verdict
(validate). Only memory is read on the request path, except the calls SPEC names (SubjectAccessReview
and quota reservation), which the collaborators make within the request's deadline.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

from policies.api import Violation
from policies.gpu_demand import GpuDemand, pod_gpu_demand
from policies.runtime import PolicyEngineError
from webhook.admission.outcome import Outcome
from webhook.admission.request import AdmissionRequest
from webhook.cluster.model import ClusterModel
from webhook.costs import format_hourly_cost
from webhook.dra.templates import ensure_claim_templates
from webhook.intent import (
    LABEL_GANG,
    OUT_ACCELERATOR_TYPE,
    OUT_DECISION,
    OUT_DRA_CLAIMS,
    OUT_HOURLY_COST,
    OUT_TENANT,
    OUTPUT_ANNOTATIONS,
    PodIntent,
    annotations_of,
    parse_intent,
)
from webhook.mutation.pipeline import NotConverging, run_pipeline
from webhook.mutation.steps import Outputs, decision_document, output_annotations_step, placement_steps
from webhook.placement.constraints import conflicts_with_pod
from webhook.placement.plan import Decision, PlacementPlan, build_plan
from webhook.scheduling.predicates import explain_infeasible, first_feasible

if TYPE_CHECKING:
    from webhook.runtime import Runtime

log = logging.getLogger("kgwe.admission")


class DeadlineExceeded(TimeoutError):
    pass


@dataclass
class Facts:
    """Everything admission knows about one pod request, gathered once."""

    request: AdmissionRequest
    pod: dict[str, Any]
    model: ClusterModel
    intent: PodIntent
    tenant: str
    namespace_object: dict[str, Any] | None
    plan: PlacementPlan
    decision: Decision | None
    demand: GpuDemand
    violations: list[Violation] = field(default_factory=list)

    @cached_property
    def conflicts(self) -> list[str]:
        """The user's own node constraints that contradict the plan (never overwritten: refused)."""
        return conflicts_with_pod(self.pod, self.plan.requirements)

    @cached_property
    def renderable(self) -> bool:
        """Placement is written only for pods `/validate` would admit: bad input gets no half-mutation."""
        return (
            self.plan.gpu_pod
            and not self.plan.refusals
            and not self.intent.problems
            and not self.demand.invalid
            and not self.conflicts
        )

    @property
    def stale_nodes(self) -> int:
        return sum(
            1 for t in self.plan.types for n in self.model.types[t].nodes[:256] if self.model.nodes[n].topology_stale
        )


class AdmissionService:
    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime

    # -- facts --------------------------------------------------------------------------------
    def _in_scope(self, request: AdmissionRequest) -> bool:
        if not request.is_pod or request.object is None:
            return False
        if request.operation not in ("CREATE", "UPDATE"):
            return False
        return request.namespace not in self.runtime.config.excluded_namespaces

    def gather(
        self, request: AdmissionRequest, pod: dict[str, Any], deadline: float | None, *, with_checks: bool = False
    ) -> Facts:
        """Everything about one pod; with `with_checks` also the policies' violations, in the same engine call."""
        runtime = self.runtime
        model = runtime.store.snapshot()
        intent = parse_intent(pod)
        namespace_object = model.namespaces.get(request.namespace)
        tenant = runtime.tenant_of(request, model)
        decision: Decision | None = None
        violations: list[Violation] = []
        demand = pod_gpu_demand(pod)
        wants_decision = (demand.asks_gpu or not intent.empty) and not intent.problems and not demand.invalid
        if runtime.policies is not None and (wants_decision or with_checks):
            try:
                decision, violations = runtime.evaluate_policies(
                    request, pod, intent, demand, namespace_object, model, tenant,
                    decide=wants_decision, check=with_checks,
                )
            except PolicyEngineError as exc:
                # policies.failureMode: closed. /validate refuses; /mutate places without a decision
                # (it fails open by design, and /validate has the last word).
                log.warning("pod %s/%s: %s", request.namespace, request.name or "(generated)", exc)
                if with_checks:
                    violations = [Violation("kgwe.policy-engine", "Deny", str(exc))]
        _check_deadline(deadline)
        plan = build_plan(pod, intent, decision, model, runtime.config, demand)
        return Facts(request, pod, model, intent, tenant, namespace_object, plan, decision, demand, violations)

    # -- mutate -------------------------------------------------------------------------------
    def mutate(self, request: AdmissionRequest, deadline: float | None = None) -> Outcome:
        if not self._in_scope(request):
            return Outcome(object=request.object)
        assert request.object is not None
        if request.operation == "UPDATE":
            return self._mutate_update(request)
        facts = self.gather(request, request.object, deadline)
        try:
            result = run_pipeline(request.object, self._steps(facts))
        except NotConverging as exc:
            log.error("pod %s/%s: %s", request.namespace, request.name or "(generated)", exc)
            return Outcome(warnings=[f"KGWE could not compute a stable mutation: {exc}"], object=request.object)
        outcome = Outcome(patch=result.patch, object=result.pod, warnings=list(facts.plan.warnings))
        if facts.renderable and facts.plan.dra is not None:
            outcome = ensure_claim_templates(self.runtime, request, facts.plan.dra, outcome, deadline)
        if self.runtime.config.mode == "audit":
            # Report by what was decided (accelerator, mig, nvlink, cost, ...), not by internal step names.
            reported = list(facts.plan.steps) if facts.renderable else []
            if "output-annotations" in result.changed_steps and not reported:
                reported.append("attribution")
            return self._audit_only(outcome, reported, request.object)
        return outcome

    def _steps(self, facts: Facts) -> list[Any]:
        plan = facts.plan
        outputs: dict[str, str | None] = dict.fromkeys(OUTPUT_ANNOTATIONS)
        if plan.gpu_pod:
            outputs[OUT_TENANT] = facts.tenant
            if facts.renderable:
                policy_name = None
                if facts.decision is not None and facts.decision.decided_by:
                    policy_name = next(iter(facts.decision.decided_by.values()))
                outputs[OUT_DECISION] = decision_document(plan, facts.stale_nodes, policy_name)
                if plan.types:
                    outputs[OUT_ACCELERATOR_TYPE] = ",".join(plan.types)
                if plan.price_per_gpu_hour is not None and plan.gpu_equivalents:
                    outputs[OUT_HOURLY_COST] = format_hourly_cost(plan.gpu_equivalents * plan.price_per_gpu_hour)
                if plan.dra is not None:
                    outputs[OUT_DRA_CLAIMS] = plan.dra.annotation
        steps = [output_annotations_step(Outputs(outputs))]
        if facts.renderable:
            steps.extend(placement_steps(plan))
        return steps

    def _mutate_update(self, request: AdmissionRequest) -> Outcome:
        """On UPDATE users may not change KGWE's output keys: restore them from the old object."""
        assert request.object is not None
        if self._is_controller(request):
            return Outcome(object=request.object)
        old = annotations_of(request.old_object or {})
        old_labels = ((request.old_object or {}).get("metadata") or {}).get("labels") or {}
        outputs: dict[str, str | None] = {key: old.get(key) for key in OUTPUT_ANNOTATIONS}

        def restore_gang_label(pod: dict[str, Any]) -> None:
            labels = (pod.get("metadata") or {}).get("labels")
            if old_labels.get(LABEL_GANG) is None:
                if isinstance(labels, dict):
                    labels.pop(LABEL_GANG, None)
            else:
                pod.setdefault("metadata", {}).setdefault("labels", {})[LABEL_GANG] = old_labels[LABEL_GANG]

        try:
            result = run_pipeline(
                request.object, [output_annotations_step(Outputs(outputs)), ("gang-label", restore_gang_label)]
            )
        except NotConverging as exc:  # pragma: no cover - two fixed steps always converge
            return Outcome(warnings=[str(exc)], object=request.object)
        outcome = Outcome(patch=result.patch, object=result.pod)
        if result.patch:
            outcome.warnings.append("kgwe.io/ output annotations are set by KGWE; your change to them was undone")
        if self.runtime.config.mode == "audit":
            return self._audit_only(outcome, ["output-guard"], request.object)
        return outcome

    def _is_controller(self, request: AdmissionRequest) -> bool:
        return request.user.username in self.runtime.config.controller_users

    def _audit_only(self, outcome: Outcome, steps: list[str], original: dict[str, Any]) -> Outcome:
        if outcome.patch:
            self.runtime.record_would_mutate(steps)
            outcome.warnings.append(f"KGWE audit mode: would mutate ({', '.join(steps)}); no change made")
            outcome.audit_annotations["would-mutate"] = ",".join(steps)
        outcome.patch = []
        outcome.object = original
        return outcome

    # -- validate -----------------------------------------------------------------------------
    def validate(self, request: AdmissionRequest, deadline: float | None = None) -> Outcome:
        if not self._in_scope(request):
            return Outcome(object=request.object)
        assert request.object is not None
        if request.operation == "UPDATE":
            return self._verdict(self._validate_update(request), [], {}, request)
        facts = self.gather(request, request.object, deadline, with_checks=True)
        problems: list[tuple[str, str]] = []  # (reason, message)
        warnings: list[str] = list(facts.plan.warnings)
        audit: dict[str, str] = {}
        for problem in facts.intent.problems:
            problems.append(("invalid", problem))
        for problem in facts.demand.invalid:
            problems.append(("invalid", problem))
        if facts.plan.gpu_pod:
            problems.extend(self._placement_problems(facts))
            _check_deadline(deadline)
            if not problems:
                problems.extend(self.runtime.authorize(request, facts, deadline))
        self._apply_violations(facts.violations, problems, warnings, audit)
        if facts.plan.gpu_pod and not problems:
            problems.extend(self.runtime.check_quota(request, facts, deadline))
        return self._verdict(problems, warnings, audit, request)

    def _placement_problems(self, facts: Facts) -> list[tuple[str, str]]:
        problems = [("placement", refusal) for refusal in facts.plan.refusals]
        problems.extend(("placement", c) for c in facts.conflicts)
        if problems:
            return problems
        pending = self._pending_mutation(facts)
        if pending:
            return [("not-mutated", pending)]
        infeasible = self._infeasible(facts)
        return [("placement", infeasible)] if infeasible else []

    def _apply_violations(
        self, violations: list[Violation], problems: list[tuple[str, str]], warnings: list[str], audit: dict[str, str]
    ) -> None:
        for violation in violations:
            key = f"policy-{violation.policy}"[:63]
            if violation.action == "Deny":
                # In audit mode `_verdict` turns this into a warning and an audit annotation.
                problems.append(("policy", f"[{violation.policy}] {violation.message}"))
                if self.runtime.config.mode == "audit":
                    audit[key] = violation.message[:256]
            elif violation.action == "Warn":
                warnings.append(f"[{violation.policy}] {violation.message}")
            else:
                audit[key] = violation.message[:256]

    def _validate_update(self, request: AdmissionRequest) -> list[tuple[str, str]]:
        if self._is_controller(request):
            return []
        new = annotations_of(request.object or {})
        old = annotations_of(request.old_object or {})
        changed = [key for key in OUTPUT_ANNOTATIONS if new.get(key) != old.get(key)]
        new_labels = ((request.object or {}).get("metadata") or {}).get("labels") or {}
        old_labels = ((request.old_object or {}).get("metadata") or {}).get("labels") or {}
        if new_labels.get(LABEL_GANG) != old_labels.get(LABEL_GANG):
            changed.append(f"label {LABEL_GANG}")
        if not changed:
            return []
        return [("output-guard", f"{', '.join(changed)} are written by KGWE and cannot be changed by users")]

    def _pending_mutation(self, facts: Facts) -> str | None:
        """Placement the mutating webhook should have written but did not (it failed open or was skipped)."""
        if self.runtime.config.mode == "audit" or not facts.renderable:
            return None
        result = run_pipeline(facts.pod, placement_steps(facts.plan))
        touched = [op["path"] for op in result.patch]
        if not touched:
            return None
        return (
            "KGWE's mutating webhook did not place this GPU pod (it was skipped or failed open), so it could land on "
            f"the wrong GPUs ({', '.join(sorted(set(p.split('/')[2] for p in touched if p.count('/') >= 2)))}); "
            "create it again"
        )

    def _infeasible(self, facts: Facts) -> str | None:
        """No node could ever run the final pod (selectors, affinity, taints, capacity), and why."""
        plan = facts.plan
        model = facts.model
        if not facts.demand.asks_gpu and not plan.steps:
            return None
        # A pod KGWE placed may run on its plan's types; any other GPU pod on any GPU node, unknown ones too.
        types = plan.types or list(model.types)
        pod = facts.pod
        if self.runtime.config.mode == "audit" and facts.renderable:
            # Audit mode returned no patch: judge the pod as KGWE would have written it.
            pod = run_pipeline(facts.pod, placement_steps(plan)).pod
        if first_feasible(pod, (model.nodes[n] for t in types for n in model.types[t].nodes)) is not None:
            return None
        why = explain_infeasible(pod, (model.nodes[n] for t in types for n in model.types[t].nodes))
        wanted = ", ".join(types) if plan.types else "every GPU node"
        return f"no node can ever run this pod: of {wanted}, {why}"

    def _verdict(
        self,
        problems: list[tuple[str, str]],
        warnings: list[str],
        audit: dict[str, str],
        request: AdmissionRequest,
    ) -> Outcome:
        outcome = Outcome(warnings=warnings, audit_annotations=audit, object=request.object)
        if not problems:
            return outcome
        for reason in dict.fromkeys(r for r, _m in problems):
            if reason != "quota":  # the quota service counts its own refusals
                self.runtime.record_refusal(reason)
        message = "; ".join(dict.fromkeys(m for _r, m in problems))
        if self.runtime.config.mode == "audit":
            outcome.warnings.insert(0, f"KGWE audit mode: would deny: {message}")
            outcome.audit_annotations["would-deny"] = message[:1024]
            return outcome
        code = 422 if all(reason == "invalid" for reason, _m in problems) else 403
        denial = Outcome.deny(message, code=code, reason="Invalid" if code == 422 else "Forbidden")
        denial.warnings = warnings
        denial.audit_annotations = audit
        denial.object = request.object
        return denial


def _check_deadline(deadline: float | None) -> None:
    if deadline is not None and time.monotonic() > deadline:
        raise DeadlineExceeded("admission deadline passed")
