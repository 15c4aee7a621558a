"""The policy runtime the webhook calls: placement decisions, admission checks, hot reload.

Per request the work is: match rules and CEL match conditions in Python (cheap, and they decide which
GPUPolicies run at all), CEL validations of the matching policies (one activation per distinct
`params`), then ONE Rego query that gathers every policy's `deny`/`warn` (or `decision`). The compiled
set is swapped atomically on reload; a request always sees one whole set.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from policies.answer_memo import MAX_KEY_BYTES, AnswerMemo, identity_free_key
from policies.api import (
    DECISION_FIELDS,
    EnforcementAction,
    PlacementDecision,
    PolicyContext,
    PolicyStatus,
    ReloadReport,
    Violation,
)
from policies.engines.cel import (
    PARAMS_TABLE,
    CelEngine,
    CelEngineName,
    CelEvaluationError,
    CelProgram,
    build_cel_engine,
)
from policies.engines.health import EngineHealth, UnreachablePrepared
from policies.engines.native_builtins import Declined, NativeBuiltins, merge_answers, native_units
from policies.engines.projection import Projection
from policies.engines.rego import (
    UNDEFINED,
    RegoCompileError,
    RegoEngine,
    RegoEngineUnavailable,
    RegoEngineUnreachable,
    RegoEvaluationError,
    RegoInput,
    RegorusEngine,
    build_rego_engine,
)
from policies.engines.rego_rvm import RegorusVmEngine, rego_vm_mode
from policies.loading.aggregate import CHECK_QUERY, DECISION_QUERY, EVERYTHING_QUERY, QUERY_KINDS, query_value
from policies.loading.gpupolicy import CompiledGPUPolicy, PolicyCompileError, Purpose
from policies.loading.loader import PolicySource, collect_sources
from policies.loading.policy_set import (
    CompiledUnit,
    PolicySet,
    compile_unit,
    duplicate_packages,
    gathered_policies,
    input_reads,
    prepare_rego,
    previous_units,
)
from policies.metrics import (
    POLICY_ENGINE_ERRORS,
    POLICY_EVALUATION_SECONDS,
    POLICY_LOAD_ERRORS,
    POLICY_VIOLATIONS,
)
from policies.vocabulary import keys
from policies.vocabulary.objects import identity_of
from rego import LIBRARY_DIR

log = logging.getLogger("kgwe.policies")

FailureMode = Literal["open", "closed"]
SHARING_MODES = keys.SHARING_MODES
TOPOLOGIES = keys.TOPOLOGIES
SET_ERROR_KEY = "<policy set>"
ENGINE_POLICY = "kgwe.policy-engine"  # the name violations about the engine itself carry


class PolicyEngineError(RuntimeError):
    """Raised by `decide_placement` in fail-closed mode when the engine could not decide."""


_UNSET = object()


@dataclass(frozen=True)
class _CelFailure:
    reason: str


@dataclass
class _CelScope:
    """One request's CEL state: its activations (one, or one per distinct params) and the values computed."""

    policy_set: PolicySet
    activations: dict[bytes, Any] = field(default_factory=dict)
    values: dict[tuple[str, bytes], Any] = field(default_factory=dict)
    # The thread's CPU and wall clocks, read together before the first evaluation: one CPU reading (a
    # system call, ~1 us here) per request instead of one per evaluation (`_cpu_over`).
    clocks: tuple[float, float] | None = None
    # The engine failed the projected input and answered the whole one: an answer not to remember (the
    # projection's key would not hold what it read).
    retried: bool = False


class _EvaluationFailed(Exception):
    def __init__(self, engine: str, policy: str, reason: str, *, unavailable: bool = False) -> None:
        super().__init__(reason)
        self.engine, self.policy, self.reason = engine, policy, reason
        self.unavailable = unavailable  # the engine could not be reached (not: a policy failed on it)


def _valid_decision_field(name: str, value: Any) -> bool:
    if name == "acceleratorTypes":
        return isinstance(value, list) and all(isinstance(v, str) for v in value)
    if name == "sharing":
        return isinstance(value, dict) and value.get("mode") in SHARING_MODES
    if name == "topology":
        return value in TOPOLOGIES
    if name == "gang":
        return isinstance(value, str) and bool(value)
    return False


class PolicyRuntime:
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
        self._generation = 0
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
        self._params: tuple[PolicySet, dict[str, Any]] | None = None
        self._answers = AnswerMemo()  # evaluate's answers for pods alike in all the policies read (_memo_key)

    @property
    def rego_engine_name(self) -> str:
        return self._rego_engine.name

    @property
    def cel_engine(self) -> CelEngine:
        if self._cel is None:
            self._cel = build_cel_engine(self._cel_engine_name)
        return self._cel

    # -- loading ------------------------------------------------------------------------------

    def reload(
        self, *, builtin: bool = True, directories: Iterable[str] = (), gpu_policies: Iterable[Mapping[str, Any]] = ()
    ) -> ReloadReport:
        """Compile a new set; never raises for a bad policy (see ReloadReport)."""
        from pathlib import Path

        with self._reload_lock:
            sources = collect_sources(
                builtin_dir=Path(self._builtin_dir) if builtin else None,
                directories=list(directories),
                gpu_policies=list(gpu_policies),
            )
            return self._reload(sources)

    def _reload(self, sources: list[PolicySource]) -> ReloadReport:
        report = ReloadReport()
        previous = previous_units(self._set)
        errors: dict[tuple[str, str], str] = {}
        repeated: set[tuple[str, str]] = set()
        libraries: list[CompiledUnit] = []
        chosen: list[CompiledUnit] = []
        # Libraries first, so that policies are validated against the libraries they import.
        ordered = sorted(sources, key=lambda s: s.is_policy)
        compiled: dict[tuple[str, str], CompiledUnit] = {}
        for source in ordered:
            key: tuple[str, str] = (source.kind, source.name)
            old = previous.get(key)
            known_failure = self._failed.get(key)
            if old is not None and old.source.fingerprint == source.fingerprint and not source.error:
                unit = old
            elif known_failure is not None and known_failure[0] == source.fingerprint:
                # The same broken version again (a directory poll, a resync): no recompile, no new count.
                errors[key] = known_failure[1]
                repeated.add(key)
                if old is None:
                    continue
                unit = old
                report.kept_previous.append(source.name)
            else:
                try:
                    unit = compile_unit(source, self.cel_engine, self._validator, libraries)
                except PolicyCompileError as exc:
                    errors[key] = str(exc)
                    self._failed[key] = (source.fingerprint, str(exc))
                    if old is None:
                        continue
                    unit = old
                    report.kept_previous.append(source.name)
            compiled[key] = unit
            if not source.is_policy:
                libraries.append(unit)
        chosen = [compiled[(s.kind, s.name)] for s in sources if (s.kind, s.name) in compiled]
        for name, reason in duplicate_packages(chosen).items():
            errors[next(k for k in compiled if k[1] == name)] = reason
            chosen = [u for u in chosen if u.name != name]
        self._failed = {k: v for k, v in self._failed.items() if k in errors}
        if [id(u) for u in chosen] == [id(u) for u in self._set.units]:
            # Nothing changed: keep the prepared set (no recompilation, no re-push to an OPA server).
            report.loaded = [u.name for u in chosen]
            self._record(report, errors, sources, served=self._set, repeated=repeated)
            return report
        try:
            prepared, gathered = prepare_rego(self._rego_engine, chosen)
            self.engine_health.mark_up()
        except RegoEngineUnavailable as exc:
            # The engine is unreachable, not refusing: serve the new set anyway. CEL runs as usual, the Rego
            # part answers per failureMode until the reconnect loop has loaded it on the engine.
            prepared, gathered = UnreachablePrepared(self._rego_engine.name, str(exc)), gathered_policies(chosen)
            self.engine_health.mark_down(str(exc))
        except RegoCompileError as exc:
            # Policies that compile alone but not together (or an engine that refused the set): keep serving
            # the last good set, and blame every unit that changed since.
            changed: list[tuple[str, str]] = [
                (s.kind, s.name) for s in sources
                if (s.kind, s.name) not in previous or previous[(s.kind, s.name)].source.fingerprint != s.fingerprint
            ]
            fingerprints = {(s.kind, s.name): s.fingerprint for s in sources}
            for key in changed or [("set", SET_ERROR_KEY)]:
                errors.setdefault(key, f"the policy set did not compile: {exc}")
                if key in fingerprints:
                    self._failed[key] = (fingerprints[key], errors[key])
            self._rollback_engine()
            self._record(report, errors, sources, served=self._set, repeated=repeated)
            return report
        self._set = PolicySet(
            units=chosen,
            prepared=prepared,
            gathered=gathered,
            has_check=any(g.rules & {"deny", "warn"} for g in gathered),
            has_decision=any("decision" in g.rules for g in gathered),
            reads=input_reads(chosen),
        )
        # After the swap: a decision computed with the old set is never cached under the new generation
        # (the cache reads the generation before it evaluates).
        self._generation += 1
        report.loaded = [u.name for u in chosen]
        self._record(report, errors, sources, served=self._set, repeated=repeated)
        return report

    def _reconnect(self) -> None:
        """Load the serving set on the engine again (the reconnect loop calls this); raises
        RegoEngineUnavailable while the engine cannot be reached."""
        with self._reload_lock:
            current = self._set
            prepared, gathered = prepare_rego(self._rego_engine, current.units)
            self._set = PolicySet(
                units=current.units, prepared=prepared, gathered=gathered,
                has_check=current.has_check, has_decision=current.has_decision, reads=current.reads,
            )
            self._generation += 1  # cached placement decisions made while the engine was down are stale

    def engine_problems(self) -> list[str]:
        """For `/readyz`: the Rego engine's current problem, if any."""
        return self.engine_health.problems()

    def close(self) -> None:
        """Stop the reconnect loop (a runtime being replaced or shut down)."""
        self.engine_health.close()

    def _rollback_engine(self) -> None:
        # A server may hold part of the refused set: push the serving set back.
        push = getattr(self._set.prepared, "push", None)
        if push is not None:
            try:
                push()
            except RegoCompileError as exc:
                log.error("could not restore the serving policy set on the OPA server: %s", exc)

    def _record(
        self, report: ReloadReport, errors: dict[tuple[str, str], str], sources: list[PolicySource],
        served: PolicySet, repeated: set[tuple[str, str]],
    ) -> None:
        serving = {(u.source.kind, u.name) for u in served.units}
        statuses: dict[tuple[str, str], PolicyStatus] = {}
        for source in sources:
            key: tuple[str, str] = (source.kind, source.name)
            statuses[key] = PolicyStatus(
                name=source.name, source=source.location, loaded=key in serving, error=errors.get(key),
                kind=source.kind,
            )
        for key, reason in errors.items():
            report.errors[key[1]] = reason
            if key not in repeated:
                POLICY_LOAD_ERRORS.labels(key[1]).inc()
                log.error("policy %s refused: %s", key[1], reason)
        self._statuses = statuses

    def status(self) -> list[PolicyStatus]:
        return list(self._statuses.values())

    @property
    def generation(self) -> int:
        """Changes whenever a new policy set starts serving (callers key caches of decisions on it)."""
        return self._generation

    def policy_names(self) -> list[str]:
        return [u.name for u in self._set.units if u.source.is_policy]

    # -- evaluation ---------------------------------------------------------------------------

    def check(self, ctx: PolicyContext) -> list[Violation]:
        """Every matching policy's violations: one Rego query and the CEL validations that apply."""
        policy_set = self._set
        started = time.perf_counter()
        violations: list[Violation] = []
        try:
            activations = _CelScope(policy_set)  # the request's CEL activations and values, shared by all phases
            active = self._active(policy_set, ctx, "check", violations, activations)
            violations.extend(v for policy in active for v in self._validate(policy, ctx, activations))
            if policy_set.has_check and policy_set.prepared is not None:
                violations.extend(self._rego_check(policy_set, ctx, active))
        finally:
            _EVALUATION_SECONDS["check"].observe(time.perf_counter() - started)
        for violation in violations:
            POLICY_VIOLATIONS.labels(violation.policy, violation.action).inc()
        return violations

    def decide_placement(self, ctx: PolicyContext) -> PlacementDecision:
        policy_set = self._set
        decision = PlacementDecision()
        if not policy_set.has_decision or policy_set.prepared is None:
            return decision
        started = time.perf_counter()
        failures: list[Violation] = []
        try:
            active = self._active(policy_set, ctx, "decide", failures, _CelScope(policy_set))
            if failures and self.failure_mode == "closed":
                raise PolicyEngineError(failures[0].message)
            failed_policies: list[_EvaluationFailed] = []
            try:
                partials = self._query(policy_set, DECISION_QUERY, ctx, active, failures=failed_policies)
            except _EvaluationFailed as failed:
                self._count_failure(failed)
                if self.failure_mode == "closed":
                    raise PolicyEngineError(f"policy engine failed: {failed.reason}") from None
                return decision
            for policy_failed in failed_policies:
                self._count_failure(policy_failed)
                if self.failure_mode == "closed":
                    raise PolicyEngineError(
                        f"policy engine failed on policy {policy_failed.policy}: {policy_failed.reason}")
        finally:
            _EVALUATION_SECONDS["decide"].observe(time.perf_counter() - started)
        return _merge_partials(policy_set, partials)

    def evaluate(self, ctx: PolicyContext) -> tuple[PlacementDecision, list[Violation]]:
        """`decide_placement` and `check` of one request with ONE Rego query (the whole aggregate package).

        For a request that needs both, as `/validate` does: the engine converts the input once and shared
        library rules are computed once.
        """
        policy_set = self._set
        if policy_set.prepared is None or not (policy_set.has_decision and policy_set.has_check):
            checked = self.check(ctx)
            try:
                return self.decide_placement(ctx), checked
            except PolicyEngineError as exc:
                if self.engine_health.up:
                    raise
                # Engine unreachable in closed mode: refuse, with the CEL policies' own messages first.
                return PlacementDecision(), [*checked, Violation(ENGINE_POLICY, "Deny", str(exc))]
        started = time.perf_counter()
        memo_key, engine_input = self._memo_key(policy_set, ctx)
        if memo_key is not None:
            remembered = self._answers.get(policy_set, ctx.cluster, memo_key)
            if remembered is not None:
                _EVALUATION_SECONDS["evaluate"].observe(time.perf_counter() - started)
                for violation in remembered[1]:
                    POLICY_VIOLATIONS.labels(violation.policy, violation.action).inc()
                return remembered
        violations: list[Violation] = []
        decision = PlacementDecision()
        try:
            activations = _CelScope(policy_set)
            active = self._active(policy_set, ctx, "evaluate", violations, activations)
            decision_failure = list(violations)
            violations.extend(v for policy in active for v in self._validate(policy, ctx, activations))
            failed_policies: list[_EvaluationFailed] = []
            try:
                everything = self._query(policy_set, EVERYTHING_QUERY, ctx, active, engine_input=engine_input,
                                         scope=activations, failures=failed_policies)
                if failed_policies:
                    memo_key = None  # a policy's failure is not the pod's answer
                    violations.extend(v for f in failed_policies for v in self._failure_violations(f))
            except _EvaluationFailed as failed:
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
            decision = _merge_partials(policy_set, everything.get("decision"))
            violations.extend(self._violations_from(everything.get("check") or {}, active))
        finally:
            _EVALUATION_SECONDS["evaluate"].observe(time.perf_counter() - started)
        for violation in violations:
            POLICY_VIOLATIONS.labels(violation.policy, violation.action).inc()
        if memo_key is not None and (activations.retried
                                     or any(isinstance(v, _CelFailure) for v in activations.values.values())):
            memo_key = None  # a CEL failure may be the clock's (the time limit), not the pod's answer
        if memo_key is not None:
            self._answers.put(policy_set, ctx.cluster, memo_key, (decision, violations), ENGINE_POLICY)
        return decision, violations

    def _memo_key(self, policy_set: PolicySet, ctx: PolicyContext) -> tuple[bytes | None, RegoInput | None]:
        """What `evaluate`'s answer is remembered under (policies/answer_memo.py), or None; and the
        engine's input when the key holds it.

        With the built-ins answered natively, an answer is the built-ins' (a function of the pod without
        its identity, the namespace, the intent and the cluster summary) merged with what the other
        policies say: admin Rego and GPUPolicy Rego read the part of the input their syntax tree reaches
        (policies/engines/rego_reads.py), GPUPolicy match rules and CEL expressions the paths their tokens
        name (policies/engines/cel_reads.py). The key holds both parts: replicas share an answer unless a
        policy reads what tells them apart."""
        if not self.native_builtins:
            return None, None
        native = self._native_for(policy_set)
        if native is None:
            return None, None
        key = identity_free_key(ctx)
        if key is None or (not policy_set.gpu_policies and native.answers((), EVERYTHING_QUERY)):
            return key, None
        projection = self._projection(policy_set, native.policies)
        if projection is None or not projection.deterministic:
            return None, None
        engine_input: RegoInput | None = None
        if policy_set.gpu_policies:
            # Which GPUPolicies run is itself a function of what the key holds: the engine's input is
            # built later, once they are known.
            widened = self._widened(policy_set, projection)
            if widened is None:
                return None, None
            # The key holds the pod without its identity, the namespace and the intent whole already: of
            # them, only the identity is left to cut.
            request = ctx.request
            read = RegoInput(widened.apply({"request": {**request, "object": identity_of(request.get("object"))},
                                            "tenant": ctx.tenant}))
        else:
            read = engine_input = RegoInput(projection.apply(self._rego_input(ctx, (), native.policies).document))
        try:
            key = key + b"\n" + read.raw
        except TypeError:
            return None, None
        return (key if len(key) <= MAX_KEY_BYTES else None), engine_input

    def _widened(self, policy_set: PolicySet, projection: Projection) -> Projection | None:
        """`projection` with what the GPUPolicies' match rules and CEL read (built once per set)."""
        cached = self._widening
        if cached is None or cached[0] is not policy_set or cached[1] is not projection:
            cached = self._widening = (policy_set, projection, projection.widened(policy_set.request_reads))
        return cached[2]

    # -- internals ----------------------------------------------------------------------------

    def _active(
        self, policy_set: PolicySet, ctx: PolicyContext, purpose: Purpose, failures: list[Violation],
        activations: _CelScope,
    ) -> list[CompiledGPUPolicy]:
        """GPUPolicies running for `purpose` whose match rules and CEL match conditions hold, filtered before
        any engine runs."""
        active = []
        for policy in policy_set.gpu_policies:
            if not policy.runs_for(purpose) or not policy.match.matches(ctx.request, ctx.namespace_object):
                continue
            try:
                if all(self._cel_true(policy, program, ctx, activations) for _, program in policy.match_conditions):
                    active.append(policy)
            except _EvaluationFailed as failed:
                failures.extend(self._failure_violations(failed))
        return active

    def _activation(self, policy: CompiledGPUPolicy, ctx: PolicyContext, cache: _CelScope) -> Any:
        shared = self.cel_engine.shares_activation
        key = b"" if shared else policy.params_key
        activation = cache.activations.get(key)
        if activation is None:
            request, namespace_object = ctx.request, ctx.namespace_object
            projection = cache.policy_set.cel_projection if self.project_input else None
            if projection is not None:
                # Converting the pod is most of an activation's cost: only what some expression can read.
                read = projection.apply({"request": request, "namespaceObject": namespace_object})
                request, namespace_object = read.get("request") or {}, read.get("namespaceObject")
            variables = {
                "object": request.get("object"),
                "oldObject": request.get("oldObject"),
                # Once, unless some expression may read the pod through `request` too.
                "request": request if cache.policy_set.cel_reads_request_objects else _without_objects(request),
                "params": None if shared else policy.params,
                "namespaceObject": namespace_object,
                "usage": ctx.usage,
            }
            if shared:  # converting the request is most of a first evaluation's cost: once per request
                variables[PARAMS_TABLE] = self._params_table(cache.policy_set)
            activation = self.cel_engine.activation(variables)
            cache.activations[key] = activation
        return activation

    def _params_table(self, policy_set: PolicySet) -> dict[str, Any]:
        cached = self._params
        if cached is None or cached[0] is not policy_set:
            self._params = cached = (policy_set, {p.params_slot: p.params for p in policy_set.gpu_policies})
        return cached[1]

    def _eval_cel(
        self, policy: CompiledGPUPolicy, program: CelProgram, ctx: PolicyContext, cache: _CelScope
    ) -> Any:
        memo_key = cache.policy_set.cel_values_keys[id(program)]
        known = cache.values.get(memo_key, _UNSET)
        if known is not _UNSET:
            if isinstance(known, _CelFailure):
                raise _EvaluationFailed(self.cel_engine.name, policy.name, known.reason)
            return known
        try:
            value = self._eval_cel_once(policy, program, ctx, cache)
        except _EvaluationFailed as failed:
            cache.values[memo_key] = _CelFailure(failed.reason)
            raise
        cache.values[memo_key] = value
        return value

    def _eval_cel_once(
        self, policy: CompiledGPUPolicy, program: CelProgram, ctx: PolicyContext, cache: _CelScope
    ) -> Any:
        activation = self._activation(policy, ctx, cache)
        if cache.clocks is None:
            cache.clocks = (time.thread_time(), time.perf_counter())
        wall = time.perf_counter()
        try:
            value = program.evaluate(activation)
        except CelEvaluationError as exc:
            raise _EvaluationFailed(self.cel_engine.name, policy.name, f"{program.source!r}: {exc}") from exc
        # CPU time never exceeds wall time: the CPU clock is asked only when the wall clock says the limit
        # may have been passed.
        limit = self.cel_time_limit
        if time.perf_counter() - wall > limit and _cpu_over(limit, cache.clocks, wall, program, activation):
            raise _EvaluationFailed(
                self.cel_engine.name, policy.name,
                f"{program.source!r} exceeded the CEL time limit of {self.cel_time_limit * 1000:g} ms",
            )
        return value

    def _cel_true(self, policy: CompiledGPUPolicy, program: CelProgram, ctx: PolicyContext, cache: _CelScope
                  ) -> bool:
        value = self._eval_cel(policy, program, ctx, cache)
        if not isinstance(value, bool):
            raise _EvaluationFailed(self.cel_engine.name, policy.name, f"{program.source!r} did not return a bool")
        return value

    def _validate(self, policy: CompiledGPUPolicy, ctx: PolicyContext, cache: _CelScope) -> list[Violation]:
        """`policy`'s violations of its validations."""
        found = []
        for validation in policy.validations:
            try:
                if self._cel_true(policy, validation.expression, ctx, cache):
                    continue
            except _EvaluationFailed as failed:
                found.extend(self._failure_violations(failed))
                continue
            message = validation.message
            if validation.message_expression is not None:
                # As in Kubernetes: a failing or non-string messageExpression falls back to `message`.
                try:
                    rendered = self._eval_cel(policy, validation.message_expression, ctx, cache)
                except _EvaluationFailed as failed:
                    log.warning("messageExpression of policy %s failed: %s", policy.name, failed.reason)
                    rendered = None
                if isinstance(rendered, str) and rendered.strip() and "\n" not in rendered:
                    message = rendered
            found.append(Violation(policy.name, policy.action, message))
        return found

    def _rego_input(self, ctx: PolicyContext, active: Iterable[CompiledGPUPolicy], native: Iterable[str] = ()
                    ) -> RegoInput:
        # Only GPUPolicies with Rego: the aggregate gates nothing else (a CEL-only policy's name would be
        # parsed for nothing).
        kgwe: dict[str, Any] = {"active": {p.name: True for p in active if p.rego_info is not None}}
        if ctx.usage is not None:
            kgwe["usage"] = ctx.usage
        skipped = dict.fromkeys(native, True)
        if skipped:
            kgwe["native"] = skipped
        return RegoInput({
            "request": ctx.request,
            "namespaceObject": ctx.namespace_object,
            "intent": ctx.intent,
            "tenant": ctx.tenant,
            "params": {},
            "kgwe": kgwe,
        })

    def _projection(self, policy_set: PolicySet, native: Iterable[str]) -> Projection | None:
        if not self.project_input or policy_set.reads is None:
            return None
        return policy_set.reads.projection(native)

    def _projected(self, policy_set: PolicySet, full: RegoInput, native: Iterable[str]) -> RegoInput:
        """`full` cut to what the running Rego modules can read (policies/engines/rego_reads.py)."""
        projection = self._projection(policy_set, native)
        return full if projection is None else RegoInput(projection.apply(full.document))

    def _native_for(self, policy_set: PolicySet) -> NativeBuiltins | None:
        """The native evaluator of `policy_set` (built once per set; None when the set needs Rego)."""
        cached = self._native
        if cached is not None and cached[0] is policy_set:
            return cached[1]
        native = NativeBuiltins.for_units(native_units(policy_set.units))
        self._native = (policy_set, native)
        return native

    def _query(self, policy_set: PolicySet, query: str, ctx: PolicyContext, active: list[CompiledGPUPolicy],
               *, natively: bool = True, engine_input: RegoInput | None = None, scope: _CelScope | None = None,
               failures: list[_EvaluationFailed] | None = None) -> Any:
        """The aggregate document `query` names: the built-ins answered in Python where they can be
        (`natively`), the rest by the engine, on the part of the input it can read (`engine_input` when
        the caller has it already, for the built-ins answered natively). With `failures`, a query that
        fails on some policies is answered by the others (`_by_policy`), the failures appended there."""
        prepared = policy_set.prepared
        assert prepared is not None
        native_answer: Any = None
        native_names: list[str] = []
        if natively and self.native_builtins:
            native = self._native_for(policy_set)
            if native is not None:
                document = {"request": ctx.request, "namespaceObject": ctx.namespace_object, "intent": ctx.intent}
                try:
                    native_answer = native.query(query, document, ctx.cluster)
                except Declined:
                    pass  # a corner only the engine is authoritative on: it answers everything
                else:
                    if native.answers((p.name for p in active), query):
                        return native_answer
                    # An active GPUPolicy's Rego must run: the engine answers it and skips the built-ins.
                    native_names = native.policies
        full = self._rego_input(ctx, active, native_names)
        if engine_input is None or not native_names:
            engine_input = self._projected(policy_set, full, native_names)
        started, wall = time.thread_time(), time.perf_counter()
        try:
            prepared.set_cluster(ctx.cluster)
            try:
                result = prepared.query(query, engine_input)
            except RegoEvaluationError:
                if engine_input is full:
                    raise
                # Never an answer the whole input would not give: a failure is asked again with it (a
                # skipped built-in the engine evaluates anyway may fail on a key the projection removed).
                result = prepared.query(query, full)
                if scope is not None:
                    scope.retried = True
        except RegoEngineUnreachable as exc:
            raise self._unreachable(policy_set, exc) from exc
        except RegoEvaluationError as exc:
            failed = _EvaluationFailed(prepared.engine_name, "rego", str(exc))
            if failures is None:
                raise failed from exc
            result = self._by_policy(policy_set, query, full, failed, failures)
        if time.perf_counter() - wall > self.rego_time_limit and time.thread_time() - started > self.rego_time_limit:
            raise _EvaluationFailed(
                prepared.engine_name, "rego", f"evaluation exceeded the Rego time limit of {self.rego_time_limit}s"
            )
        result = {} if result is UNDEFINED else result
        if native_names:
            try:
                return merge_answers(native_answer, result)
            except Declined:
                if failures is not None:
                    failures.clear()  # asked again, whole: its own failures only
                return self._query(policy_set, query, ctx, active, natively=False, scope=scope, failures=failures)
        return result

    def _unreachable(self, policy_set: PolicySet, exc: RegoEngineUnreachable) -> _EvaluationFailed:
        """The failure of an engine that could not be reached, marked down for the set being served."""
        if policy_set is self._set:  # a request still on a set the reconnect loop just replaced says nothing
            self.engine_health.mark_down(str(exc))
        assert policy_set.prepared is not None
        return _EvaluationFailed(policy_set.prepared.engine_name, "rego", str(exc), unavailable=True)

    def _by_policy(self, policy_set: PolicySet, query: str, full: RegoInput, failed: _EvaluationFailed,
                   failures: list[_EvaluationFailed]) -> Any:
        """The document `query` names, assembled policy by policy after the one query failed: each policy
        that fails alone is appended to `failures` (and says what failureMode makes it say), the others
        answer as in the aggregate. One policy that fails, perhaps made to by a value the pod's creator
        chose, must not silence every other one. Raises `failed` when no single policy fails alone (then
        the failure is the aggregate's own: a module in its package)."""
        prepared = policy_set.prepared
        assert prepared is not None
        gates = full.document.get("kgwe") or {}
        active, native = gates.get("active") or {}, gates.get("native") or {}
        kinds = QUERY_KINDS[query]
        found: dict[str, dict[str, Any]] = {kind: {} for kind in kinds}
        failing: list[_EvaluationFailed] = []
        for policy in policy_set.gathered:
            if (policy.gated and not active.get(policy.name)) or (not policy.gated and native.get(policy.name)):
                continue  # the aggregate skips it too
            answers: dict[str, Any] = {}
            try:
                for kind in kinds:
                    if kind in policy.rules:
                        value = prepared.query(f"data.{policy.package}.{kind}", full)
                        if value is not UNDEFINED:
                            answers[kind] = value
            except RegoEngineUnreachable as exc:
                raise self._unreachable(policy_set, exc) from exc
            except RegoEvaluationError as exc:
                failing.append(_EvaluationFailed(prepared.engine_name, policy.name, str(exc)))
                continue
            for kind, value in answers.items():
                found[kind][policy.name] = value
        if not failing:
            raise failed
        failures.extend(failing)
        return query_value(query, lambda: {kind: found[kind] for kind in ("deny", "warn") if kind in found},
                           lambda: found["decision"])

    def _rego_check(self, policy_set: PolicySet, ctx: PolicyContext, active: list[CompiledGPUPolicy]
                    ) -> list[Violation]:
        failures: list[_EvaluationFailed] = []
        try:
            result = self._query(policy_set, CHECK_QUERY, ctx, active, failures=failures)
        except _EvaluationFailed as failed:
            if failed.unavailable:
                self._count_failure(failed)
                return self._unavailable_violations(policy_set, active, failed, with_decision=False)
            return self._failure_violations(failed)
        return [*self._violations_from(result, active), *(v for f in failures for v in self._failure_violations(f))]

    @staticmethod
    def _violations_from(result: Any, active: list[CompiledGPUPolicy]) -> list[Violation]:
        if not isinstance(result, dict):
            return []
        actions: dict[str, EnforcementAction] | None = None
        found = []
        for kind in ("deny", "warn"):
            for policy, messages in (result.get(kind) or {}).items():
                if not messages:
                    continue  # most policies, on most requests
                if actions is None:
                    actions = {p.name: p.action for p in active}
                action = _action(kind, actions.get(policy))
                for message in sorted(str(m) for m in messages):
                    found.append(Violation(policy, action, message))
        return found

    def _count_failure(self, failed: _EvaluationFailed) -> None:
        POLICY_ENGINE_ERRORS.labels(failed.engine).inc()
        if not failed.unavailable:  # an unreachable engine is logged once per state change (EngineHealth)
            log.error("policy engine %s failed on policy %s: %s", failed.engine, failed.policy, failed.reason)

    def _unavailable_violations(
        self, policy_set: PolicySet, active: list[CompiledGPUPolicy], failed: _EvaluationFailed, *,
        with_decision: bool,
    ) -> list[Violation]:
        """The Rego policies that would have run on this pod, answered per failureMode: closed, a Deny each;
        open, a warning each. A GPUPolicy counts when its match rules and CEL match conditions held (they
        were evaluated without the engine); built-in and library Rego policies decide for themselves whether
        a pod concerns them, so without the engine they count for every pod."""
        kinds = {"deny", "warn", "decision"} if with_decision else {"deny", "warn"}
        action: EnforcementAction = "Deny" if self.failure_mode == "closed" else "Warn"
        unavailable = f"policy engine {failed.engine} unavailable ({failed.reason})"
        found = [
            Violation(p.name, action, f"the Rego part of policy {p.name} could not be evaluated: {unavailable}")
            for p in active if _has_rules(p, *kinds)
        ]
        ungated = [g.name for g in policy_set.gathered if not g.gated and g.rules & kinds]
        if ungated:
            named = ", ".join(ungated[:5]) + (f" and {len(ungated) - 5} more" if len(ungated) > 5 else "")
            message = f"Rego policies {named} could not be evaluated: {unavailable}"
            found.append(Violation(ENGINE_POLICY, action, message))
        return found

    def _failure_violations(self, failed: _EvaluationFailed) -> list[Violation]:
        """A policy that could not be evaluated: closed, a Deny; open, a warning. Both are marked `failed`:
        an error never admits a GPU pod (/validate refuses one whatever the mode, webhook/admission/validate.py)."""
        self._count_failure(failed)
        message = f"the policy engine failed: {failed.reason}"
        return [Violation(failed.policy, "Deny" if self.failure_mode == "closed" else "Warn", message, failed=True)]


# The evaluation-time histogram's children, looked up once (`labels()` takes a lock and builds a key).
_EVALUATION_SECONDS = {kind: POLICY_EVALUATION_SECONDS.labels(kind) for kind in ("check", "decide", "evaluate")}


def _cpu_over(limit: float, clocks: tuple[float, float], wall: float, program: CelProgram, activation: Any) -> bool:
    """Whether an evaluation of `program` that began at `wall` (perf_counter) and took longer than `limit`
    in wall time used more than `limit` of this thread's CPU. `clocks` are the thread's CPU and wall
    clocks read together before it began. CPU time never exceeds wall time, so the CPU used since then
    bounds the evaluation's from above, and that minus the wall time between `clocks` and `wall` bounds it
    from below; when the limit lies between the two, the evaluation (pure, deterministic) is timed alone."""
    cpu_mark, wall_mark = clocks
    used = time.thread_time() - cpu_mark
    if used <= limit:
        return False
    if used - (wall - wall_mark) > limit:
        return True
    started = time.thread_time()
    with contextlib.suppress(CelEvaluationError):
        program.evaluate(activation)
    return time.thread_time() - started > limit


def _without_objects(request: Mapping[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in request.items() if key != "object" and key != "oldObject"}


def _merge_partials(policy_set: PolicySet, partials: Any) -> PlacementDecision:
    """Merge every policy's partial decision in load order (later policies override earlier ones)."""
    decision = PlacementDecision()
    if not isinstance(partials, dict):
        return decision
    for gathered in policy_set.gathered:
        partial = partials.get(gathered.name)
        if not isinstance(partial, dict):
            continue
        for name in DECISION_FIELDS:
            if name not in partial:
                continue
            if _valid_decision_field(name, partial[name]):
                decision.fields[name] = partial[name]
                decision.decided_by[name] = gathered.name
            else:
                log.warning("policy %s decided an invalid %s: %r", gathered.name, name, partial[name])
    return decision


def _has_rules(policy: CompiledGPUPolicy, *rules: str) -> bool:
    return policy.rego_info is not None and bool(policy.rego_info.rules & set(rules))


def _action(kind: str, gpu_policy_action: EnforcementAction | None) -> EnforcementAction:
    """Built-in and library policies: deny -> Deny, warn -> Warn. A GPUPolicy's `deny` takes its
    enforcementAction; its `warn` stays a warning unless the whole policy is in Audit."""
    if gpu_policy_action is None:
        return "Deny" if kind == "deny" else "Warn"
    if gpu_policy_action == "Audit":
        return "Audit"
    return gpu_policy_action if kind == "deny" else "Warn"


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
