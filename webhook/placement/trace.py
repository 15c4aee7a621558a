"""The decision trace of a placement plan: each step, the candidate accelerator types it kept, and why it
dropped the others. Collected by the steps of `build_plan` (webhook/placement/plan.py `PLAN_STEPS`) as
they narrow the candidates (data, no text layout); rendered by webhook/explain.py for `kgwe explain`,
`kgwe review --explain`, the UI's "why" and Events.

Type ids and reasons come from the cluster model and the plan's own refusal text, never from raw pod
input beyond what the plan already bounded.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol


@dataclass(frozen=True)
class TraceStep:
    """One narrowing step: `kept` in preference order, `dropped` as (type id, why)."""

    step: str
    kept: tuple[str, ...]
    dropped: tuple[tuple[str, str], ...] = ()
    note: str = ""

    def as_json(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "kept": list(self.kept),
            "dropped": [{"type": type_id, "why": why} for type_id, why in self.dropped],
            "note": self.note,
        }


Why = str | Callable[[str], str]


class Traced(Protocol):
    """What a trace is written into: the placement plan (webhook/placement/context.py), named by shape so
    that the plan can hold `TraceStep`s without the two modules importing each other."""

    trace: list[TraceStep]
    refusals: list[str]


def record(plan: Traced, step: str, kept: Iterable[str], why: Why = "", note: str = "") -> None:
    """Append `step` to `plan.trace`: `kept` are the candidates left after it; those the previous step
    kept and this one did not are dropped, each with `why(type_id)` (or the string `why`)."""
    kept_tuple = tuple(kept)
    previous = plan.trace[-1].kept if plan.trace else kept_tuple
    if previous == kept_tuple:  # most steps keep every candidate: nothing was dropped
        plan.trace.append(TraceStep(step, kept_tuple, (), note))
        return
    dropped = tuple(
        (type_id, why(type_id) if callable(why) else why) for type_id in previous if type_id not in kept_tuple
    )
    plan.trace.append(TraceStep(step, kept_tuple, dropped, note))


def refusal_or(plan: Traced, fallback: str) -> Why:
    """The plan's last refusal (what a failed step said) when it has one, else `fallback`."""
    return plan.refusals[-1] if plan.refusals else fallback
