"""What a request evaluates of a policy set once it knows which match groups matched, worked out once.

A request asks each match group (`PolicySet.match_groups`) whether it matches; the rest follows from the
answer and the set alone: which GPUPolicies may run for the purpose (`check`, `decide`, `evaluate`), which
CEL match conditions decide them, and, once the active ones are known, which validations run. Each step
names its CEL programs once per value key (one expression over one request and one params has one value,
however many policies state it), in the order the policies state them, so the runtime evaluates them in
one joined program and reads each policy's answer by key. Steps are remembered per set, up to
MAX_REMEMBERED of each kind; past that a step is worked out for its request alone, with the same result.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, TypeVar

from policies.engines.cel import CelProgram
from policies.loading.gpupolicy import CompiledGPUPolicy

Purpose = Literal["check", "decide", "evaluate"]
ValueKey = tuple[str, bytes]  # PolicySet.cel_values_keys: the expression and, where it reads them, the params

# The Rego rule kinds each purpose runs; a GPUPolicy with validations runs for `check` and `evaluate` too.
PURPOSE_KINDS: dict[Purpose, frozenset[str]] = {
    "check": frozenset({"deny", "warn"}),
    "decide": frozenset({"decision"}),
    "evaluate": frozenset({"deny", "warn", "decision"}),
}
MAX_REMEMBERED = 512

_Key = TypeVar("_Key")


@dataclass(frozen=True)
class CelStep:
    """Policies, each with the value keys of its programs for this step, and the programs to evaluate."""

    policies: tuple[CompiledGPUPolicy, ...]
    keys: tuple[tuple[ValueKey, ...], ...]  # by policy, in its own order
    distinct: tuple[tuple[ValueKey, CelProgram], ...]  # each key once, in first-stated order
    programs: tuple[CelProgram, ...]  # the programs of `distinct`, to join


def cel_step(policies: Sequence[CompiledGPUPolicy], programs: Callable[[CompiledGPUPolicy], Sequence[CelProgram]],
             value_keys: Mapping[int, ValueKey]) -> CelStep:
    keys: list[tuple[ValueKey, ...]] = []
    distinct: dict[ValueKey, CelProgram] = {}
    for policy in policies:
        stated = programs(policy)
        own = tuple(value_keys[id(program)] for program in stated)
        keys.append(own)
        for key, program in zip(own, stated, strict=True):
            distinct.setdefault(key, program)
    return CelStep(tuple(policies), tuple(keys), tuple(distinct.items()), tuple(distinct.values()))


def _conditions(policy: CompiledGPUPolicy) -> list[CelProgram]:
    return [program for _, program in policy.match_conditions]


def _validations(policy: CompiledGPUPolicy) -> list[CelProgram]:
    return [validation.expression for validation in policy.validations]


def _runs_for(policy: CompiledGPUPolicy, purpose: Purpose) -> bool:
    if purpose != "decide" and policy.validations:
        return True
    return policy.rego_info is not None and bool(policy.rego_info.rules & PURPOSE_KINDS[purpose])


class Plans:
    """The steps of one policy set (thread-safe: a step is immutable, a race works one out twice)."""

    def __init__(self, groups: Sequence[Sequence[CompiledGPUPolicy]], gpu_policies: Sequence[CompiledGPUPolicy],
                 value_keys: Mapping[int, ValueKey]) -> None:
        self._group_of = {id(policy): index for index, group in enumerate(groups) for policy in group}
        self._policies = tuple(gpu_policies)
        self._value_keys = value_keys
        self._candidates: dict[tuple[Purpose, tuple[bool, ...]], CelStep] = {}
        self._validated: dict[tuple[int, ...], CelStep] = {}
        self._lock = threading.Lock()

    def candidates(self, purpose: Purpose, matched: tuple[bool, ...]) -> CelStep:
        """The GPUPolicies of the matched groups that run for `purpose`, in load order, with their match
        conditions."""
        key = (purpose, matched)
        step = self._candidates.get(key)
        if step is None:
            chosen = [p for p in self._policies if matched[self._group_of[id(p)]] and _runs_for(p, purpose)]
            step = cel_step(chosen, _conditions, self._value_keys)
            self._remember(self._candidates, key, step)
        return step

    def validations(self, active: Sequence[CompiledGPUPolicy]) -> CelStep:
        """The active policies with validations, in order, with their validations' expressions."""
        key = tuple(map(id, active))
        step = self._validated.get(key)
        if step is None:
            step = cel_step([p for p in active if p.validations], _validations, self._value_keys)
            self._remember(self._validated, key, step)
        return step

    def _remember(self, steps: dict[_Key, CelStep], key: _Key, step: CelStep) -> None:
        with self._lock:
            if len(steps) < MAX_REMEMBERED:
                steps[key] = step


__all__ = ["MAX_REMEMBERED", "PURPOSE_KINDS", "CelStep", "Plans", "Purpose", "ValueKey", "cel_step"]
