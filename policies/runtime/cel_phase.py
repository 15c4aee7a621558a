"""The CEL part of a request: which GPUPolicies match (match rules and CEL match conditions) and their
CEL validations, with the request's activations and values shared by every expression.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from policies.api import PolicyContext, Violation
from policies.engines.cel import PARAMS_TABLE, CelEvaluationError, CelProgram
from policies.loading.gpupolicy import CompiledGPUPolicy, Purpose
from policies.loading.policy_set import PolicySet
from policies.runtime.base import RuntimeBase
from policies.runtime.outcomes import EvaluationFailed

log = logging.getLogger("kgwe.policies")

_UNSET = object()


@dataclass(frozen=True)
class CelFailure:
    reason: str


@dataclass
class CelScope:
    """One request's CEL state: its activations (one, or one per distinct params) and the values computed."""

    policy_set: PolicySet
    activations: dict[bytes, Any] = field(default_factory=dict)
    values: dict[tuple[str, bytes], Any] = field(default_factory=dict)
    # The thread's CPU and wall clocks, read together before the first evaluation: one CPU reading (a
    # system call, ~1 us here) per request instead of one per evaluation (`cpu_over`).
    clocks: tuple[float, float] | None = None
    # The engine failed the projected input and answered the whole one: an answer not to remember (the
    # projection's key would not hold what it read).
    retried: bool = False


class CelPhase(RuntimeBase):
    def _active(
        self, policy_set: PolicySet, ctx: PolicyContext, purpose: Purpose, failures: list[Violation],
        activations: CelScope,
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
            except EvaluationFailed as failed:
                failures.extend(self._failure_violations(failed))
        return active

    def _activation(self, policy: CompiledGPUPolicy, ctx: PolicyContext, cache: CelScope) -> Any:
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
        self, policy: CompiledGPUPolicy, program: CelProgram, ctx: PolicyContext, cache: CelScope
    ) -> Any:
        memo_key = cache.policy_set.cel_values_keys[id(program)]
        known = cache.values.get(memo_key, _UNSET)
        if known is not _UNSET:
            if isinstance(known, CelFailure):
                raise EvaluationFailed(self.cel_engine.name, policy.name, known.reason)
            return known
        try:
            value = self._eval_cel_once(policy, program, ctx, cache)
        except EvaluationFailed as failed:
            cache.values[memo_key] = CelFailure(failed.reason)
            raise
        cache.values[memo_key] = value
        return value

    def _eval_cel_once(
        self, policy: CompiledGPUPolicy, program: CelProgram, ctx: PolicyContext, cache: CelScope
    ) -> Any:
        activation = self._activation(policy, ctx, cache)
        if cache.clocks is None:
            cache.clocks = (time.thread_time(), time.perf_counter())
        wall = time.perf_counter()
        try:
            value = program.evaluate(activation)
        except CelEvaluationError as exc:
            raise EvaluationFailed(self.cel_engine.name, policy.name, f"{program.source!r}: {exc}") from exc
        # CPU time never exceeds wall time: the CPU clock is asked only when the wall clock says the limit
        # may have been passed.
        limit = self.cel_time_limit
        if time.perf_counter() - wall > limit and cpu_over(limit, cache.clocks, wall, program, activation):
            raise EvaluationFailed(
                self.cel_engine.name, policy.name,
                f"{program.source!r} exceeded the CEL time limit of {self.cel_time_limit * 1000:g} ms",
            )
        return value

    def _cel_true(self, policy: CompiledGPUPolicy, program: CelProgram, ctx: PolicyContext, cache: CelScope
                  ) -> bool:
        value = self._eval_cel(policy, program, ctx, cache)
        if not isinstance(value, bool):
            raise EvaluationFailed(self.cel_engine.name, policy.name, f"{program.source!r} did not return a bool")
        return value

    def _validate(self, policy: CompiledGPUPolicy, ctx: PolicyContext, cache: CelScope) -> list[Violation]:
        """`policy`'s violations of its validations."""
        found = []
        for validation in policy.validations:
            try:
                if self._cel_true(policy, validation.expression, ctx, cache):
                    continue
            except EvaluationFailed as failed:
                found.extend(self._failure_violations(failed))
                continue
            message = validation.message
            if validation.message_expression is not None:
                # As in Kubernetes: a failing or non-string messageExpression falls back to `message`.
                try:
                    rendered = self._eval_cel(policy, validation.message_expression, ctx, cache)
                except EvaluationFailed as failed:
                    log.warning("messageExpression of policy %s failed: %s", policy.name, failed.reason)
                    rendered = None
                if isinstance(rendered, str) and rendered.strip() and "\n" not in rendered:
                    message = rendered
            found.append(Violation(policy.name, policy.action, message))
        return found


def cpu_over(limit: float, clocks: tuple[float, float], wall: float, program: CelProgram, activation: Any) -> bool:
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

