"""What the runtime answers: its violations, the decision merged from the policies' partials, and the
failures it raises or reports.
"""

from __future__ import annotations

import logging
from typing import Any

from policies.api import DECISION_FIELDS, EnforcementAction, PlacementDecision, Violation
from policies.loading.gpupolicy import CompiledGPUPolicy
from policies.loading.policy_set import PolicySet
from policies.vocabulary import keys

log = logging.getLogger("kgwe.policies")

SHARING_MODES = keys.SHARING_MODES
TOPOLOGIES = keys.TOPOLOGIES
ENGINE_POLICY = "kgwe.policy-engine"  # the name violations about the engine itself carry


class PolicyEngineError(RuntimeError):
    """Raised by `decide_placement` in fail-closed mode when the engine could not decide."""



class EvaluationFailed(Exception):
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



def violations_from(result: Any, active: list[CompiledGPUPolicy]) -> list[Violation]:
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
            action = action_of(kind, actions.get(policy))
            for message in sorted(str(m) for m in messages):
                found.append(Violation(policy, action, message))
    return found


def merge_partials(policy_set: PolicySet, partials: Any) -> PlacementDecision:
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


def has_rules(policy: CompiledGPUPolicy, *rules: str) -> bool:
    return policy.rego_info is not None and bool(policy.rego_info.rules & set(rules))


def action_of(kind: str, gpu_policy_action: EnforcementAction | None) -> EnforcementAction:
    """Built-in and library policies: deny -> Deny, warn -> Warn. A GPUPolicy's `deny` takes its
    enforcementAction; its `warn` stays a warning unless the whole policy is in Audit."""
    if gpu_policy_action is None:
        return "Deny" if kind == "deny" else "Warn"
    if gpu_policy_action == "Audit":
        return "Audit"
    return gpu_policy_action if kind == "deny" else "Warn"

