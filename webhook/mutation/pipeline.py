"""Mutation as small steps over one in-memory pod, run to a fixpoint, rendered as one JSON Patch.

Each step looks at the pod and the request's facts and changes what it owns. Steps run in order, pass
after pass, until a pass changes nothing; more passes than steps + 1 means two steps fight, which is an
error (`NotConverging`), not a loop. The patch is the difference between the pod as received and the
pod at the fixpoint, so reviewing the result again changes nothing (reinvocationPolicy: IfNeeded).

A step changed the pod when the pod's JSON with sorted keys differs after it (a mapping rebuilt in another
order is no change), found from the plain JSON, sorted only where that cannot tell. The first pass is judged
step by step; a later one, which almost never changes anything, is judged whole, and run again step by step
from where it began when it did. A pass whose steps undo each other's change is therefore taken as settled
where the step-by-step judgement would not converge: only a step writing another's path (or one nobody owns)
can undo another's change, which strict mode, judging every step of every pass, names.

Every step belongs to a mutator that declares the paths it owns (webhook/mutation/mutators.py). Each
run checks its final patch against those declarations (`check_patch`: a path lookup per patch
operation, cheap enough for every request); strict mode (`strict_ownership`, on in the mutation tests)
also diffs each step's own change, so a step writing another step's paths is named even when both ran.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import orjson

from webhook.mutation import mutators
from webhook.mutation.mutators import OwnershipViolation, check_patch, check_step
from webhook.mutation.patch import JsonPatch, diff

__all__ = [
    "NotConverging",
    "OwnershipViolation",
    "PipelineResult",
    "Step",
    "copy_json",
    "run_pipeline",
    "strict_ownership",
]

Step = mutators.Step


class NotConverging(RuntimeError):
    pass


@dataclass
class PipelineResult:
    pod: dict[str, Any]
    patch: JsonPatch
    changed_steps: list[str] = field(default_factory=list)
    passes: int = 0


_strict = False


@contextmanager
def strict_ownership(enabled: bool = True) -> Iterator[None]:
    """Within the block, every step's own change is checked against its mutator's paths (a diff per
    changing step: for tests, not the request path)."""
    global _strict
    previous, _strict = _strict, enabled
    try:
        yield
    finally:
        _strict = previous


def copy_json(value: dict[str, Any]) -> dict[str, Any]:
    # orjson round-trips a pod several times faster than copy.deepcopy.
    result: dict[str, Any] = orjson.loads(orjson.dumps(value))
    return result


def _changed(before: bytes, after: bytes, working: dict[str, Any]) -> bool:
    """Whether the pod serialised as `after` (`working`) differs from `before` once keys are sorted: a step
    that rebuilds a mapping in another order changes nothing. Sorting permutes an object's members without
    changing a byte of them, so the sorted forms are needed only where the plain ones differ but are as long."""
    if after == before:
        return False
    if len(after) != len(before):
        return True
    return orjson.dumps(working, option=orjson.OPT_SORT_KEYS) != orjson.dumps(orjson.loads(before),
                                                                              option=orjson.OPT_SORT_KEYS)


def run_pipeline(pod: dict[str, Any], steps: Sequence[Step]) -> PipelineResult:
    """Run `steps` over a copy of `pod` to a fixpoint. Raises `NotConverging` when steps fight and
    `OwnershipViolation` when a step wrote outside its mutator's paths."""
    # The bytes of the copy are the pod before the first step; each step's are the pod before the next.
    before = orjson.dumps(pod)
    working: dict[str, Any] = orjson.loads(before)
    changed_steps: list[str] = []
    max_passes = len(steps) + 1
    strict = _strict
    for passes in range(1, max_passes + 1):
        if passes > 1 and not strict:
            # A pass after the first almost never changes the pod: judged whole, one serialisation instead
            # of one per step. One that did is run again step by step from where it began, naming its steps.
            for _name, step in steps:
                step(working)
            after = orjson.dumps(working)
            if not _changed(before, after, working):
                return _converged(pod, working, steps, changed_steps, passes)
            working = orjson.loads(before)
        any_change = False
        for name, step in steps:
            step(working)
            after = orjson.dumps(working)
            if _changed(before, after, working):
                any_change = True
                if name not in changed_steps:
                    changed_steps.append(name)
                if strict:
                    check_step(name, diff(orjson.loads(before), working))
            before = after
        if not any_change:
            return _converged(pod, working, steps, changed_steps, passes)
    raise NotConverging(f"mutation did not converge after {max_passes} passes (steps: {', '.join(changed_steps)})")


def _converged(pod: dict[str, Any], working: dict[str, Any], steps: Sequence[Step], changed_steps: list[str],
               passes: int) -> PipelineResult:
    patch = diff(pod, working)
    check_patch(patch, [name for name, _step in steps], changed_steps)
    return PipelineResult(working, patch, changed_steps, passes)
