"""What a request evaluates of a policy set once it knows which match groups matched, worked out once.

A request asks each match group (`PolicySet.match_groups`) whether it matches; the rest follows from the
answer and the set alone: which GPUPolicies may run for the purpose (`check`, `decide`, `evaluate`), their
CEL match conditions deciding which of them are active. Steps are remembered per set, up to MAX_REMEMBERED;
past that a step is worked out for its request alone, with the same result.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Literal, TypeVar

from policies.loading.gpupolicy import CompiledGPUPolicy

Purpose = Literal["check", "decide", "evaluate"]

# The Rego rule kinds each purpose runs; a GPUPolicy with validations runs for `check` and `evaluate` too.
PURPOSE_KINDS: dict[Purpose, frozenset[str]] = {
    "check": frozenset({"deny", "warn"}),
    "decide": frozenset({"decision"}),
    "evaluate": frozenset({"deny", "warn", "decision"}),
}
MAX_REMEMBERED = 512

_Key = TypeVar("_Key")
Step = tuple[CompiledGPUPolicy, ...]


def _runs_for(policy: CompiledGPUPolicy, purpose: Purpose) -> bool:
    if purpose != "decide" and policy.validations:
        return True
    return policy.rego_info is not None and bool(policy.rego_info.rules & PURPOSE_KINDS[purpose])


class Plans:
    """The steps of one policy set (thread-safe: a step is immutable, a race works one out twice)."""

    def __init__(self, groups: Sequence[Sequence[CompiledGPUPolicy]], gpu_policies: Sequence[CompiledGPUPolicy]
                 ) -> None:
        self._group_of = {id(policy): index for index, group in enumerate(groups) for policy in group}
        self._policies = tuple(gpu_policies)
        self._candidates: dict[tuple[Purpose, tuple[bool, ...]], Step] = {}
        self._lock = threading.Lock()

    def candidates(self, purpose: Purpose, matched: tuple[bool, ...]) -> Step:
        """The GPUPolicies of the matched groups that run for `purpose`, in load order (their match
        conditions decide which are active)."""
        key = (purpose, matched)
        step = self._candidates.get(key)
        if step is None:
            step = tuple(p for p in self._policies if matched[self._group_of[id(p)]] and _runs_for(p, purpose))
            self._remember(self._candidates, key, step)
        return step

    def _remember(self, steps: dict[_Key, Step], key: _Key, step: Step) -> None:
        with self._lock:
            if len(steps) < MAX_REMEMBERED:
                steps[key] = step


__all__ = ["MAX_REMEMBERED", "PURPOSE_KINDS", "Plans", "Purpose", "Step"]
