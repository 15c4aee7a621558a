"""What the runtime's parts share: its engines, its settings and the serving policy set, and how an
evaluation that failed is answered per failureMode.
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Literal

from policies.api import EnforcementAction, PolicyStatus, Violation
from policies.engines.cel import CelEngine, CelEngineName, build_cel_engine
from policies.engines.health import EngineHealth
from policies.engines.native_builtins import NativeBuiltins
from policies.engines.projection import Projection
from policies.engines.rego import RegoEngine
from policies.kernel.metrics import POLICY_ENGINE_ERRORS
from policies.loading.gpupolicy import CompiledGPUPolicy
from policies.loading.policy_set import PolicySet
from policies.runtime.answer_memo import AnswerMemo
from policies.runtime.outcomes import ENGINE_POLICY, EvaluationFailed, has_rules

log = logging.getLogger("kgwe.policies")

FailureMode = Literal["open", "closed"]


class RuntimeBase:
    """The runtime's state (set by `PolicyRuntime.__init__`) and the answers to failures."""

    _rego_engine: RegoEngine
    _validator: RegoEngine
    _cel_engine_name: CelEngineName
    _cel: CelEngine | None
    failure_mode: FailureMode
    _builtin_dir: str
    rego_time_limit: float
    cel_time_limit: float
    _set: PolicySet
    _statuses: dict[tuple[str, str], PolicyStatus]
    _failed: dict[tuple[str, str], tuple[str, str]]
    _reload_lock: threading.Lock
    engine_health: EngineHealth
    native_builtins: bool
    _native: tuple[PolicySet, NativeBuiltins | None] | None
    project_input: bool
    _widening: tuple[PolicySet, Projection, Projection | None] | None
    _replica_sets: tuple[PolicySet, bool] | None
    _params: tuple[PolicySet, dict[str, Any]] | None
    _answers: AnswerMemo

    @property
    def rego_engine_name(self) -> str:
        return self._rego_engine.name

    @property
    def cel_engine(self) -> CelEngine:
        if self._cel is None:
            self._cel = build_cel_engine(self._cel_engine_name)
        return self._cel

    def _count_failure(self, failed: EvaluationFailed) -> None:
        POLICY_ENGINE_ERRORS.labels(failed.engine).inc()
        if not failed.unavailable:  # an unreachable engine is logged once per state change (EngineHealth)
            log.error("policy engine %s failed on policy %s: %s", failed.engine, failed.policy, failed.reason)

    def _unavailable_violations(
        self, policy_set: PolicySet, active: list[CompiledGPUPolicy], failed: EvaluationFailed, *,
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
            for p in active if has_rules(p, *kinds)
        ]
        ungated = [g.name for g in policy_set.gathered if not g.gated and g.rules & kinds]
        if ungated:
            named = ", ".join(ungated[:5]) + (f" and {len(ungated) - 5} more" if len(ungated) > 5 else "")
            message = f"Rego policies {named} could not be evaluated: {unavailable}"
            found.append(Violation(ENGINE_POLICY, action, message))
        return found

    def _failure_violations(self, failed: EvaluationFailed) -> list[Violation]:
        """A policy that could not be evaluated: closed, a Deny; open, a warning. Both are marked `failed`:
        an error never admits a GPU pod (/validate refuses one whatever the mode, webhook/admission/validate.py)."""
        self._count_failure(failed)
        message = f"the policy engine failed: {failed.reason}"
        return [Violation(failed.policy, "Deny" if self.failure_mode == "closed" else "Warn", message, failed=True)]


