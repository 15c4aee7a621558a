"""Mutation as small steps over one in-memory pod, run to a fixpoint, rendered as one JSON Patch.

Each step looks at the pod and the request's facts and changes what it owns. Steps run in order, pass
after pass, until a pass changes nothing; more passes than steps + 1 means two steps fight, which is an
error (`NotConverging`), not a loop. The patch is the difference between the pod as received and the
pod at the fixpoint, so reviewing the result again changes nothing (reinvocationPolicy: IfNeeded).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from webhook.mutation.patch import JsonPatch, diff


class NotConverging(RuntimeError):
    pass


@dataclass
class PipelineResult:
    pod: dict[str, Any]
    patch: JsonPatch
    changed_steps: list[str] = field(default_factory=list)
    passes: int = 0


Step = tuple[str, Callable[[dict[str, Any]], None]]


def copy_json(value: dict[str, Any]) -> dict[str, Any]:
    # orjson round-trips a pod several times faster than copy.deepcopy.
    result: dict[str, Any] = orjson.loads(orjson.dumps(value))
    return result


def run_pipeline(pod: dict[str, Any], steps: Sequence[Step]) -> PipelineResult:
    working = copy_json(pod)
    changed_steps: list[str] = []
    max_passes = len(steps) + 1
    for passes in range(1, max_passes + 1):
        any_change = False
        for name, step in steps:
            before = orjson.dumps(working, option=orjson.OPT_SORT_KEYS)
            step(working)
            if orjson.dumps(working, option=orjson.OPT_SORT_KEYS) != before:
                any_change = True
                if name not in changed_steps:
                    changed_steps.append(name)
        if not any_change:
            return PipelineResult(working, diff(pod, working), changed_steps, passes)
    raise NotConverging(f"mutation did not converge after {max_passes} passes (steps: {', '.join(changed_steps)})")
