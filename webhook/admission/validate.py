"""Validate: the verdict `/validate` answers for a pod (decode -> gather -> **policies and gates decide**
-> respond).

The CPU-bound part (`prepare_verdict`: invalid intent, policy violations, ownership of KGWE's outputs,
placement) runs first; the gates that may do I/O (RBAC, quota) run after it, in order, only while no
problem is found, off the event loop when they may block (`validate_async`). Whatever cannot be decided
refuses a GPU or KGWE pod (`fails_closed`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

from policies.api import Violation, WouldBlock
from policies.gpu_demand import pod_gpu_demand
from policies.kernel.metric_kinds import KeptChildren, counter
from policies.runtime.outcomes import PolicyEngineError
from policies.vocabulary import keys
from webhook.admission.facts import Facts, Problem
from webhook.admission.gather import FactGathering, check_deadline
from webhook.admission.outcome import Outcome
from webhook.admission.ownership import (
    PREFIX as KGWE_PREFIX,
)
from webhook.admission.ownership import (
    changed_kgwe_keys,
    lifted_kgwe_gates,
    remembered_mismatches,
    requested_by_refusal,
)
from webhook.admission.ports import AdmissionPorts
from webhook.admission.replicas import remembered
from webhook.admission.request import AdmissionRequest
from webhook.admission.seams import AdmissionGate, AdmissionSeams, Gate, PendingVerdict
from webhook.intent import OUT_REQUESTED_BY, parse_intent
from webhook.mutation.pipeline import run_pipeline
from webhook.mutation.steps import placement_steps
from webhook.scheduling.predicates import explain_infeasible, first_feasible

# When KGWE lifts each of its gates, for the refusal of anyone else who tries.
GATE_LIFTED_WHEN = {
    keys.GANG: "kgwe.io/gang when the whole gang can be placed",
    keys.QUOTA_GATE: "kgwe.io/quota when the tenant's quota holds the pod",
}

log = logging.getLogger("kgwe.admission")


# Gates that may wait on the network (SubjectAccessReview, quota compare-and-swap) run on this many
# threads, never on the event loop: a slow API server stalls only the requests that need it.
GATE_THREADS = 8
# Pauses (seconds) before the event loop asks a gate again when what blocked it is a lock held for a
# moment (`WouldBlock.soon`: another worker's quota transaction, ~10 us). A thread hop costs more: the
# thread must win the GIL back from a loop busy with other requests, which made the two-worker p99 of
# `/validate` two to three times its value without quotas. The first pause only lets the requests
# already read run; epoll rounds the others up to a millisecond, during which the loop serves other
# requests. Past the last pause the check takes a thread.
LOOP_RETRY_PAUSES = (0.0, 0.0001, 0.0002, 0.0004, 0.0008)
GATE_ANSWERS = counter(
    "kgwe_validate_gate_answers_total",
    "I/O gates of /validate by where they answered: at once, after retries on the event loop, on a thread",
    ["gate", "where"],
)
_GATE_ANSWERED = KeptChildren(GATE_ANSWERS)


class Validation(FactGathering):
    """The validating flow of the admission core."""

    def __init__(self, runtime: AdmissionPorts, seams: AdmissionSeams | None = None) -> None:
        super().__init__(runtime, seams)
        self._gates: ThreadPoolExecutor | None = None

    def prepare_verdict(self, request: AdmissionRequest, deadline: float | None) -> Outcome | PendingVerdict:
        """The CPU-bound part of validation (an answer, or the gates still to run); `AdmissionService` sends
        the kinds other than Pod to their handlers first."""
        return self.prepare_pod_verdict(request, deadline)

    def validate(self, request: AdmissionRequest, deadline: float | None = None) -> Outcome:
        """The validating answer, gates run inline (for `kgwe review` and tests)."""
        return self._inline(request, self.prepare_verdict(request, deadline), deadline)

    def validate_pod(self, request: AdmissionRequest, deadline: float | None = None) -> Outcome:
        """A pod's validating answer, gates run inline: a kind handler's pods (a workload's templates)."""
        return self._inline(request, self.prepare_pod_verdict(request, deadline), deadline)

    def _inline(self, request: AdmissionRequest, pending: Outcome | PendingVerdict, deadline: float | None) -> Outcome:
        if isinstance(pending, Outcome):
            return pending
        for gate in pending.gates:
            if pending.problems:
                break
            pending.problems.extend(gate.run(deadline))
        return self._verdict(pending.problems, pending.warnings, pending.audit, request)

    async def validate_async(self, request: AdmissionRequest, deadline: float | None = None) -> Outcome:
        """The validating answer for the server: gates that may block run on threads, each bounded by
        what is left of the deadline. A gate that cannot answer in time refuses (fail closed)."""
        pending = self.prepare_verdict(request, deadline)
        if isinstance(pending, Outcome):
            return pending
        for gate in pending.gates:
            if pending.problems:
                break
            if not gate.blocking:
                pending.problems.extend(gate.run(deadline))
                continue
            if gate.try_now is not None:
                answered = await _try_on_loop(gate, deadline)
                if answered is not None:
                    pending.problems.extend(answered)
                    continue
            _GATE_ANSWERED(gate.name, "thread").inc()
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                pending.problems.append((gate.name, f"no time was left to check {gate.name}; try again"))
                break
            # asyncio is imported here, where a gate takes a thread (about 0.1 ms), not at the top: the
            # server has it loaded by then, and `kgwe review`, which runs its gates inline, never loads it
            # (docs/performance.md, "The server's libraries, not loaded by a one-shot command").
            import asyncio

            try:
                thread = asyncio.get_running_loop().run_in_executor(self._gate_pool(), gate.run, deadline)
                found = await asyncio.wait_for(thread, left)
            except TimeoutError:
                log.warning("%s check for %s/%s did not answer in time", gate.name, request.namespace, request.name)
                found = [(gate.name, f"the {gate.name} check did not answer in time; try again")]
            pending.problems.extend(found)
        return self._verdict(pending.problems, pending.warnings, pending.audit, request)

    def _gate_pool(self) -> ThreadPoolExecutor:
        if self._gates is None:
            self._gates = ThreadPoolExecutor(GATE_THREADS, thread_name_prefix="kgwe-gate")
        return self._gates

    def prepare_pod_verdict(self, request: AdmissionRequest, deadline: float | None) -> Outcome | PendingVerdict:
        """The CPU-bound part of a pod's validation: an answer, or the gates still to run."""
        screened = self._screen(request)
        if screened is not None:
            return screened
        assert request.object is not None
        if request.operation == "UPDATE":
            return self._prepare_update(request, deadline)
        facts = self.gather(request, request.object, deadline, with_checks=True)
        problems: list[Problem] = [("invalid", p) for p in facts.intent.problems + facts.demand.invalid]
        warnings: list[str] = facts.intent.warnings + facts.plan.warnings
        audit: dict[str, str] = {}
        # A policy's own refusal leads the message: it is what the user must change.
        self._apply_violations(facts.violations, problems, warnings, audit, request)
        if not problems:
            problems.extend(self._ownership_problems(facts))
        if facts.plan.gpu_pod and not facts.intent.problems and not facts.demand.invalid:
            check_deadline(deadline)
            # The same for every replica of a workload: judged once per plan memo entry (replicas.py).
            placement = remembered(facts, "validate.placement", self.runtime.config, self._placement_problems)
            if not _kgwe_placed(facts):
                # A pod without KGWE intent passes as it came (SPEC section 1): admission plugins KGWE does
                # not see may tolerate taints, nodes may lack labels. At most a warning.
                warnings.extend(f"KGWE: {m}" for _r, m in placement)
            else:
                problems.extend(placement)
        if not problems and not request.template:
            for gate in self.seams.gates:
                refused, warned = gate.advise(request, facts)
                problems.extend(refused)
                warnings.extend(warned)
        checks: list[Gate] = []
        for gate in self.seams.gates:  # a loop, not a generator: every pod request asks each gate
            check = gate.check(request, facts)
            if check is not None:
                checks.append(check)
        return PendingVerdict(request, problems, warnings, audit, checks)

    def _prepare_update(self, request: AdmissionRequest, deadline: float | None) -> PendingVerdict:
        """UPDATE: `kgwe.io/` keys are fixed at creation; GPUPolicies apply as their `match.operations` say."""
        problems: list[Problem] = []
        controller = self._is_controller(request)
        changed = changed_kgwe_keys(request.old_pod, request.pod, outputs_too=not controller)
        if changed:
            problems.append(("output-guard", f"{', '.join(changed)}: kgwe.io/ keys are fixed at creation"))
        lifted = [] if controller else lifted_kgwe_gates(request.old_pod, request.pod)
        if lifted:
            when = "; ".join(GATE_LIFTED_WHEN.get(g, f"{g} when KGWE decides") for g in lifted)
            problems.append(("output-guard", f"scheduling gate {', '.join(lifted)} is lifted by KGWE alone: {when}"))
        warnings: list[str] = []
        audit: dict[str, str] = {}
        if not controller:
            self._apply_violations(self._update_violations(request, deadline), problems, warnings, audit, request)
        return PendingVerdict(request, problems, warnings, audit)

    def _update_violations(self, request: AdmissionRequest, deadline: float | None) -> list[Violation]:
        runtime = self.runtime
        if runtime.policies is None:
            return []
        pod = request.object or {}
        model = runtime.store.snapshot()
        intent = parse_intent(request.pod)
        try:
            _decision, violations = runtime.policy_glue.evaluate_policies(
                request, pod, intent, pod_gpu_demand(request.pod), model.namespaces.get(request.namespace), model,
                runtime.tenant_of(request, model), decide=False, check=True,
            )
        except PolicyEngineError as exc:
            return [Violation("kgwe.policy-engine", "Deny", str(exc))]
        check_deadline(deadline)
        return violations

    def _ownership_problems(self, facts: Facts) -> list[Problem]:
        """Output keys present on the pod must be exactly what KGWE writes for it (mutate may have been
        skipped: its failurePolicy is Ignore), so nobody can pick a tenant, a price or a gang."""
        if self.runtime.config.mode == "audit":
            return []  # audit mode writes nothing, and refuses nothing
        wrong = remembered_mismatches(facts, self.runtime.config)
        problems: list[Problem] = [p for gate in self.seams.gates for p in gate.output_problems(facts)]
        if not wrong:
            return problems
        if OUT_REQUESTED_BY in wrong:
            problems.append(("output-guard", requested_by_refusal(facts.request)))
            wrong.remove(OUT_REQUESTED_BY)
        if wrong:
            problems.append(("not-mutated", f"{', '.join(wrong)} must be written by KGWE, not by the pod's creator; "
                                            "remove them and create the pod again"))
        return problems

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
        self, violations: list[Violation], problems: list[tuple[str, str]], warnings: list[str], audit: dict[str, str],
        request: AdmissionRequest,
    ) -> None:
        """The policies' answers as refusals, warnings and audit annotations. Where `request` fails closed
        (`fails_closed`, asked only when some policy failed), a policy that could not be evaluated refuses
        it whatever policies.failureMode says, so that a value that makes a policy fail never gets a GPU pod
        past it."""
        closed = any(v.failed for v in violations) and fails_closed(request)
        for violation in violations:
            key = f"policy-{violation.policy}"[:63]
            if violation.action == "Deny" or (violation.failed and closed):
                # In audit mode `_verdict` turns this into a warning and an audit annotation.
                message = violation.message if violation.action == "Deny" else (
                    f"{violation.message}; a GPU pod is refused while a policy cannot decide it")
                problems.append(("policy", f"[{violation.policy}] {message}"))
                if self.runtime.config.mode == "audit":
                    audit[key] = violation.message[:256]
            elif violation.action == "Warn":
                warnings.append(f"[{violation.policy}] {violation.message}")
            else:
                audit[key] = violation.message[:256]

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
        placed = _kgwe_placed(facts) and bool(plan.types)
        types = plan.types if placed else list(model.types)
        pod = facts.pod
        if self.runtime.config.mode == "audit" and facts.renderable:
            # Audit mode returned no patch: judge the pod as KGWE would have written it.
            pod = run_pipeline(facts.pod, placement_steps(plan)).pod
        if first_feasible(pod, (model.nodes[n] for t in types for n in model.types[t].nodes)) is not None:
            return None
        why = explain_infeasible(pod, (model.nodes[n] for t in types for n in model.types[t].nodes))
        wanted = ", ".join(types) if placed else "every GPU node"
        return f"no node can ever run this pod: of {wanted}, {why}"

    def _verdict(
        self,
        problems: list[tuple[str, str]],
        warnings: list[str],
        audit: dict[str, str],
        request: AdmissionRequest,
    ) -> Outcome:
        if not problems:
            return Outcome(warnings=warnings, audit_annotations=audit, object=request.object)
        for reason in dict.fromkeys(r for r, _m in problems):
            if reason != "quota":  # the quota service counts its own refusals
                self.runtime.record_refusal(reason)
        message = "; ".join(dict.fromkeys(m for _r, m in problems))
        if self.runtime.config.mode == "audit":
            outcome = Outcome(warnings=warnings, audit_annotations=audit, object=request.object)
            outcome.warnings.insert(0, f"KGWE audit mode: would deny: {message}")
            outcome.audit_annotations["would-deny"] = message[:1024]
            return outcome
        code = 422 if all(reason == "invalid" for reason, _m in problems) else 403
        return Outcome.deny(message, code, "Invalid" if code == 422 else "Forbidden", warnings=warnings,
                            audit_annotations=audit, object=request.object)


async def _try_on_loop(gate: Gate, deadline: float | None) -> list[Problem] | None:
    """The gate's answer without a thread: asked at once, then again after each of `LOOP_RETRY_PAUSES`
    while what blocks it is a lock held for a moment. None when it has to wait on a thread."""
    assert gate.try_now is not None
    for attempt, pause in enumerate((None, *LOOP_RETRY_PAUSES)):
        if pause is not None:
            if deadline is not None and time.monotonic() + pause >= deadline:
                return None
            import asyncio  # a retry, past the answer at once: as the thread's above

            await asyncio.sleep(pause)
        try:
            answer = gate.try_now(deadline)
        except WouldBlock as blocked:
            if not blocked.soon:
                return None
            continue
        _GATE_ANSWERED(gate.name, "at-once" if attempt == 0 else "loop-retry").inc()
        return answer
    return None


def _kgwe_placed(facts: Facts) -> bool:
    """Whether KGWE steers this pod (user intent, or a policy's placement), beyond attribution."""
    return not facts.intent.empty or any(step != "cost" for step in facts.plan.steps)


def fails_closed(request: AdmissionRequest, gates: Sequence[AdmissionGate] = ()) -> bool:
    """Whether `/validate` must refuse this request when it cannot decide (deadline, internal error).

    True for GPU pods, pods with any `kgwe.io/` key and every other object sent to the webhook (the
    webhook configuration sends workloads only for their GPU templates); only pods shown to ask for
    nothing of KGWE follow `limits.onError`. Any doubt, an exception included, counts as True.
    """
    try:
        if request.invalid is not None:
            return True
        if request.object is None:
            return False
        if not request.is_pod:
            return True
        if request.pod.has_key_with_prefix(KGWE_PREFIX) or request.old_pod.has_key_with_prefix(KGWE_PREFIX):
            return True
        if any(gate.fails_closed(request) for gate in gates):
            return True  # it asks something a gate guards (DRA claims of its own may be GPUs)
        return pod_gpu_demand(request.pod).asks_gpu
    except Exception:
        return True
