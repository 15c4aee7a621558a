"""The Rego part of a request: one aggregate query, the built-ins answered natively where they can be,
the input cut to what the running modules read, and a failing query answered policy by policy.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from policies.api import PolicyContext, Violation
from policies.engines.aggregate import CHECK_QUERY, QUERY_KINDS, query_value
from policies.engines.native_builtins import NativeBuiltins, merge_answers, native_units
from policies.engines.native_rules import Declined
from policies.engines.projection import Projection
from policies.engines.rego import UNDEFINED, RegoEngineUnreachable, RegoEvaluationError, RegoInput
from policies.loading.gpupolicy import CompiledGPUPolicy
from policies.loading.policy_set import PolicySet
from policies.runtime.base import RuntimeBase
from policies.runtime.cel_phase import CelScope
from policies.runtime.outcomes import EvaluationFailed, violations_from


class RegoPhase(RuntimeBase):
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
               *, natively: bool = True, engine_input: RegoInput | None = None, scope: CelScope | None = None,
               failures: list[EvaluationFailed] | None = None) -> Any:
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
            failed = EvaluationFailed(prepared.engine_name, "rego", str(exc))
            if failures is None:
                raise failed from exc
            result = self._by_policy(policy_set, query, full, failed, failures)
        if time.perf_counter() - wall > self.rego_time_limit and time.thread_time() - started > self.rego_time_limit:
            raise EvaluationFailed(
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

    def _unreachable(self, policy_set: PolicySet, exc: RegoEngineUnreachable) -> EvaluationFailed:
        """The failure of an engine that could not be reached, marked down for the set being served."""
        if policy_set is self._set:  # a request still on a set the reconnect loop just replaced says nothing
            self.engine_health.mark_down(str(exc))
        assert policy_set.prepared is not None
        return EvaluationFailed(policy_set.prepared.engine_name, "rego", str(exc), unavailable=True)

    def _by_policy(self, policy_set: PolicySet, query: str, full: RegoInput, failed: EvaluationFailed,
                   failures: list[EvaluationFailed]) -> Any:
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
        failing: list[EvaluationFailed] = []
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
                failing.append(EvaluationFailed(prepared.engine_name, policy.name, str(exc)))
                continue
            for kind, value in answers.items():
                found[kind][policy.name] = value
        if not failing:
            raise failed
        failures.extend(failing)
        return query_value(query, lambda: {kind: found[kind] for kind in ("deny", "warn") if kind in found},
                           lambda: found["decision"])

    def _rego_check(self, policy_set: PolicySet, ctx: PolicyContext, active: list[CompiledGPUPolicy],
                    failing: list[EvaluationFailed] | None = None) -> list[Violation]:
        """The Rego policies' violations; what failed is also appended to `failing`, when given."""
        failures: list[EvaluationFailed] = []
        try:
            result = self._query(policy_set, CHECK_QUERY, ctx, active, failures=failures)
        except EvaluationFailed as failed:
            if failing is not None:
                failing.append(failed)
            if failed.unavailable:
                self._count_failure(failed)
                return self._unavailable_violations(policy_set, active, failed, with_decision=False)
            return self._failure_violations(failed)
        if failing is not None:
            failing.extend(failures)
        return [*violations_from(result, active), *(v for f in failures for v in self._failure_violations(f))]

