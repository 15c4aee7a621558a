"""The policy runtime the webhook calls: placement decisions, admission checks, hot reload.

Per request the work is: match rules and CEL match conditions in Python (cheap, and they decide which
GPUPolicies run at all), CEL validations of the matching policies (one activation per distinct
`params`), then ONE Rego query that gathers every policy's `deny`/`warn` (or `decision`). The compiled
set is swapped atomically on reload; a request always sees one whole set.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Literal

from policies.api import PlacementDecision, PolicyContext, PolicyStatus, Violation
from policies.engines.aggregate import DECISION_QUERY, EVERYTHING_QUERY
from policies.engines.cel import CelEngine, CelEngineName
from policies.engines.health import EngineHealth
from policies.engines.native_builtins import NativeBuiltins
from policies.engines.projection import Projection
from policies.engines.rego import RegoEngine, RegorusEngine
from policies.engines.rego_opa import build_rego_engine
from policies.engines.rego_rvm import RegorusVmEngine, rego_vm_mode
from policies.kernel.metric_kinds import KeptChildren
from policies.kernel.metrics import POLICY_EVALUATION_SECONDS, POLICY_VIOLATIONS
from policies.loading.policy_set import PolicySet
from policies.runtime.answer_memo import AnswerMemo
from policies.runtime.base import FailureMode
from policies.runtime.cel_phase import CelFailure, CelPhase, CelScope
from policies.runtime.memo_keys import MemoKeys
from policies.runtime.outcomes import (
    ENGINE_POLICY,
    EvaluationFailed,
    PolicyEngineError,
    merge_partials,
    violations_from,
)
from policies.runtime.reloading import Reloading
from rego import LIBRARY_DIR

log = logging.getLogger("kgwe.policies")


class PolicyRuntime(Reloading, CelPhase, MemoKeys):
    """Thread-safe; holds the last good compiled policy set."""

    def __init__(
        self,
        rego_engine: RegoEngine,
        *,
        cel_engine: CelEngineName = "cel-expr-python",
        failure_mode: FailureMode = "open",
        validator: RegoEngine | None = None,
        builtin_dir: str | None = None,
        # CPU time of the evaluating thread, not wall time: a policy is charged for its own work, never for
        # a busy machine preempting it (the webhook's request deadline bounds the wall time).
        rego_time_limit: float = 0.5,
        cel_time_limit: float = 0.05,
        native_builtins: bool | None = None,
    ) -> None:
        self._rego_engine = rego_engine
        # Units are validated one by one on the embedded engine: cheap, local, and it names the culprit.
        self._validator = validator or (rego_engine if isinstance(rego_engine, RegorusEngine) else RegorusEngine())
        self._cel_engine_name = cel_engine
        self._cel: CelEngine | None = None
        self.failure_mode = failure_mode
        self._builtin_dir = builtin_dir or str(LIBRARY_DIR)
        self.rego_time_limit = rego_time_limit
        self.cel_time_limit = cel_time_limit
        self._set = PolicySet(units=[], prepared=None)
        self._statuses: dict[tuple[str, str], PolicyStatus] = {}
        self._failed: dict[tuple[str, str], tuple[str, str]] = {}  # key -> (fingerprint, error) of refused versions
        self._reload_lock = threading.Lock()
        # Only an engine in another process can be unreachable; the embedded ones are always "up".
        self.engine_health = EngineHealth(rego_engine.name, self._reconnect)
        # The built-in policies answered in Python when nothing else in Rego runs (policies/engines/native_builtins.py).
        # Default: with the embedded engine only; an OPA engine the operator chose stays the one that answers.
        self.native_builtins = rego_engine.name == "regorus" if native_builtins is None else native_builtins
        self._native: tuple[PolicySet, NativeBuiltins | None] | None = None
        # The engine and CEL are handed only what the running policies can read (policies/engines/rego_reads.py,
        # cel_reads.py); off, they get whole inputs and only the built-ins' answers are remembered (the
        # tests' reference).
        self.project_input = True
        self._widening: tuple[PolicySet, Projection, Projection | None] | None = None
        self._replica_sets: tuple[PolicySet, bool] | None = None  # replica_token's answer for the last set
        self._params: tuple[PolicySet, dict[str, Any]] | None = None
        self._answers = AnswerMemo()  # evaluate's answers for pods alike in all the policies read (_memo_key)


    # -- evaluation ---------------------------------------------------------------------------

    def check(self, ctx: PolicyContext) -> list[Violation]:
        """Every matching policy's violations: one Rego query and the CEL validations that apply."""
        return self.check_for_replicas(ctx)[0]

    def check_for_replicas(self, ctx: PolicyContext) -> tuple[list[Violation], PolicySet | None]:
        """`check`, and the set (`replica_token`) under which its answer holds for every request with the same
        inputs to `identity_free_key` in the same cluster summary: given only when the set answers from those
        alone and nothing failed (a failure is not the pod's answer), else None."""
        policy_set = self._set
        started = time.perf_counter()
        violations: list[Violation] = []
        failing: list[EvaluationFailed] = []
        try:
            activations = CelScope(policy_set)  # the request's CEL activations and values, shared by all phases
            active = self._active(policy_set, ctx, "check", violations, activations)
            violations.extend(v for policy in active for v in self._validate(policy, ctx, activations))
            if policy_set.has_check and policy_set.prepared is not None:
                violations.extend(self._rego_check(policy_set, ctx, active, failing))
        finally:
            _EVALUATION_SECONDS["check"].observe(time.perf_counter() - started)
        for violation in violations:
            _VIOLATIONS(violation.policy, violation.action).inc()
        if failing or activations.retried or any(isinstance(v, CelFailure) for v in activations.values.values()):
            return violations, None
        return violations, self._shared(policy_set)

    def decide_placement(self, ctx: PolicyContext) -> PlacementDecision:
        return self.decide_for_replicas(ctx)[0]

    def decide_for_replicas(self, ctx: PolicyContext) -> tuple[PlacementDecision, PolicySet | None]:
        """`decide_placement`, and the set (`replica_token`) under which its answer holds for every request with
        the same inputs to `identity_free_key` in the same cluster summary: given only when nothing failed (a
        failure, the Rego time limit's included, is not the pod's answer), else None."""
        policy_set = self._set
        decision = PlacementDecision()
        if not policy_set.has_decision or policy_set.prepared is None:
            return decision, None
        started = time.perf_counter()
        failures: list[Violation] = []
        scope = CelScope(policy_set)
        try:
            active = self._active(policy_set, ctx, "decide", failures, scope)
            if failures and self.failure_mode == "closed":
                raise PolicyEngineError(failures[0].message)
            failed_policies: list[EvaluationFailed] = []
            try:
                partials = self._query(policy_set, DECISION_QUERY, ctx, active, scope=scope,
                                       failures=failed_policies)
            except EvaluationFailed as failed:
                self._count_failure(failed)
                if self.failure_mode == "closed":
                    raise PolicyEngineError(f"policy engine failed: {failed.reason}") from None
                return decision, None
            for policy_failed in failed_policies:
                self._count_failure(policy_failed)
                if self.failure_mode == "closed":
                    raise PolicyEngineError(
                        f"policy engine failed on policy {policy_failed.policy}: {policy_failed.reason}")
        finally:
            _EVALUATION_SECONDS["decide"].observe(time.perf_counter() - started)
        decision = merge_partials(policy_set, partials)
        if failures or failed_policies or scope.retried:
            return decision, None
        return decision, self._shared(policy_set)

    def evaluate(self, ctx: PolicyContext) -> tuple[PlacementDecision, list[Violation]]:
        """`decide_placement` and `check` of one request with ONE Rego query (the whole aggregate package).

        For a request that needs both, as `/validate` does: the engine converts the input once and shared
        library rules are computed once.
        """
        decision, violations, _shared = self.evaluate_for_replicas(ctx)
        return decision, violations

    def evaluate_for_replicas(self, ctx: PolicyContext
                              ) -> tuple[PlacementDecision, list[Violation], PolicySet | None]:
        """`evaluate`, and the set (`replica_token`) under which its answer holds for every request with the
        same inputs to `identity_free_key` in the same cluster summary: given only when the answer is the one
        the memo holds for them (served from it, or just put there), else None."""
        policy_set = self._set
        if policy_set.prepared is None or not (policy_set.has_decision and policy_set.has_check):
            checked = self.check(ctx)
            try:
                return self.decide_placement(ctx), checked, None
            except PolicyEngineError as exc:
                if self.engine_health.up:
                    raise
                # Engine unreachable in closed mode: refuse, with the CEL policies' own messages first.
                return PlacementDecision(), [*checked, Violation(ENGINE_POLICY, "Deny", str(exc))], None
        started = time.perf_counter()
        memo_key, engine_input = self._memo_key(policy_set, ctx)
        if memo_key is not None:
            remembered = self._answers.get(policy_set, ctx.cluster, memo_key)
            if remembered is not None:
                self.count_remembered(remembered[1], time.perf_counter() - started)
                return remembered[0], remembered[1], self._shared(policy_set)
        violations: list[Violation] = []
        decision = PlacementDecision()
        try:
            activations = CelScope(policy_set)
            active = self._active(policy_set, ctx, "evaluate", violations, activations)
            decision_failure = list(violations)
            violations.extend(v for policy in active for v in self._validate(policy, ctx, activations))
            failed_policies: list[EvaluationFailed] = []
            try:
                everything = self._query(policy_set, EVERYTHING_QUERY, ctx, active, engine_input=engine_input,
                                         scope=activations, failures=failed_policies)
                if failed_policies:
                    memo_key = None  # a policy's failure is not the pod's answer
                    violations.extend(v for f in failed_policies for v in self._failure_violations(f))
            except EvaluationFailed as failed:
                everything = {}
                memo_key = None  # the engine's failure (failing open, it reads as no violation) is not the pod's answer
                if failed.unavailable:
                    # Not a PolicyEngineError: the CEL violations found above are answered too, first.
                    self._count_failure(failed)
                    violations.extend(self._unavailable_violations(policy_set, active, failed, with_decision=True))
                else:
                    violations.extend(self._failure_violations(failed))
                    if self.failure_mode == "closed":
                        raise PolicyEngineError(f"policy engine failed: {failed.reason}") from None
            if decision_failure and self.failure_mode == "closed":
                raise PolicyEngineError(decision_failure[0].message)
            if not isinstance(everything, dict):
                everything = {}
            decision = merge_partials(policy_set, everything.get("decision"))
            violations.extend(violations_from(everything.get("check") or {}, active))
        finally:
            _EVALUATION_SECONDS["evaluate"].observe(time.perf_counter() - started)
        for violation in violations:
            _VIOLATIONS(violation.policy, violation.action).inc()
        if memo_key is not None and (activations.retried
                                     or any(isinstance(v, CelFailure) for v in activations.values.values())):
            memo_key = None  # a CEL failure may be the clock's (the time limit), not the pod's answer
        if memo_key is not None and self._answers.put(policy_set, ctx.cluster, memo_key, (decision, violations),
                                                      ENGINE_POLICY):
            return decision, violations, self._shared(policy_set)
        return decision, violations, None

    def _shared(self, policy_set: PolicySet) -> PolicySet | None:
        return policy_set if self.replica_token() is policy_set else None

    def count_remembered(self, violations: list[Violation], seconds: float, kind: str = "evaluate") -> None:
        """The metrics of an evaluation answered from remembered answers (`kind`: `evaluate` or `check`), as
        those methods count their own."""
        _EVALUATION_SECONDS[kind].observe(seconds)
        for violation in violations:
            _VIOLATIONS(violation.policy, violation.action).inc()


# The evaluation-time histogram's children, looked up once (`labels()` takes a lock and builds a key).
_EVALUATION_SECONDS = {kind: POLICY_EVALUATION_SECONDS.labels(kind) for kind in ("check", "decide", "evaluate")}
_VIOLATIONS = KeptChildren(POLICY_VIOLATIONS)  # children by (policy, action): counted for every violation answered



def build_runtime(
    *,
    rego_engine: Literal["embedded", "opa", "opa-go"] = "embedded",
    opa_url: str | None = None,
    failure_mode: FailureMode = "open",
    cel_engine: CelEngineName = "cel-expr-python",
    rego_vm: str | None = None,
) -> PolicyRuntime:
    """A runtime with no policies loaded yet; call `reload()` (in the serving process, after any fork).

    `rego_vm` (`auto` | `off`, default `KGWE_REGO_VM` or `auto`): with the embedded engine, serve a policy
    set on regorus' compiled VM when it gives the interpreter's answers."""
    engine_name = {"embedded": "regorus", "opa": "opa", "opa-go": "opa-go"}[rego_engine]
    engine: RegoEngine
    if engine_name == "regorus":
        # regorus' compiled VM where it answers as the interpreter does (policies/engines/rego_rvm.py).
        engine = RegorusVmEngine(rego_vm_mode(rego_vm))
    else:
        engine = build_rego_engine(engine_name, opa_url)  # type: ignore[arg-type]
    return PolicyRuntime(engine, cel_engine=cel_engine, failure_mode=failure_mode)
