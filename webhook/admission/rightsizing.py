"""Rightsizing at admission (SPEC section 11, docs/usage.md "At admission"): what `rightsizing.mode` does to
one pod, or to one template of a workload, from the workload's row of the usage table (pure).

- `recommend`: a warning naming the recommended intent and the saving.
- `auto`: the sizing intent (`kgwe.io/accelerator`, `profile`, `gpu-memory`, `sharing`, `gpu-fraction`)
  replaced by the recommended one, what was asked recorded in `kgwe.io/rightsized-from`, as VPA's
  `Initial` mode: at creation only, nothing running is evicted or restarted.

`auto` writes only what annotations can say: a recommendation that would change the pod's GPU count
(fewer whole GPUs), a pod that asks MIG or DRA devices itself, a gang member (its gang must agree) or a
recommendation below `rightsizing.autoMinConfidence` is a warning instead. A pod or template that says
`kgwe.io/rightsizing: "off"`, or already carries `kgwe.io/rightsized-from`, is left as it is. Every value
read here from the pod is bounded before it is used: annotations are the pod creator's to write.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from policies.gpu_demand import GpuDemand
from policies.vocabulary import keys
from webhook.admission.facts import UsageRow
from webhook.config import Rightsizing, RightsizingMode
from webhook.intent import PodIntent
from webhook.mutation.mutators import RIGHTSIZING_MUTATOR
from webhook.mutation.mutators import SIZING_KEYS as RIGHTSIZING_MUTATOR_KEYS
from webhook.mutation.pipeline import Step

# The intent that says how big a pod's GPU is; auto replaces all of it (a profile left beside a recommended
# type would contradict it). Its mutator owns these keys (webhook/mutation/mutators.py).
SIZING_KEYS = RIGHTSIZING_MUTATOR_KEYS
MAX_OPT_OUT_CHARS = 16
MAX_RECORD_CHARS = 2048
MAX_WARNING_CHARS = 200  # the response keeps 120 (webhook/admission/response.py)


@dataclass(frozen=True)
class Advice:
    """What rightsizing does to one pod: warnings, and the annotation changes of `auto` (None: remove)."""

    warnings: list[str] = field(default_factory=list)
    changes: dict[str, str | None] = field(default_factory=dict)
    # Whether a rewrite was tried on the pod (`Mutation._rightsize`): the gates that judged it may ask the API
    # (RBAC), so the answer is more than a function of the pod and the snapshot, and is not remembered.
    tried: bool = False

    @property
    def rewrites(self) -> bool:
        return bool(self.changes)


def opted_out(notes: Mapping[str, str]) -> bool:
    value = notes.get(keys.RIGHTSIZING)
    return value is not None and len(value) <= MAX_OPT_OUT_CHARS and value.strip().lower() in ("off", "false")


def mode_of(settings: Rightsizing, namespace_labels: Mapping[str, str], notes: Mapping[str, str]) -> RightsizingMode:
    profile = notes.get(keys.PROFILE)
    # A profile name longer than any object name cannot match a rule: not compared at all.
    named = profile.strip() if profile is not None and len(profile) <= 253 else None
    return settings.mode_for(namespace_labels, named)


def _saving(usage: UsageRow) -> str:
    """`KGWE rightsizing: saves ...`: the saving, then the shape and the workload (the API server keeps 120
    characters of a warning: what matters first)."""
    rec = usage.recommendation
    assert rec is not None
    money = f" + {rec.hourly_saved_per_pod} {rec.currency}/h" if rec.hourly_saved_per_pod is not None else ""
    return _bounded(f"KGWE rightsizing: saves {rec.gpu_equivalents_saved_per_pod:g} GPU-eq{money} per pod with "
                    f"{rec.shape} ({rec.confidence_level} confidence; {usage.workload}, peak "
                    f"{usage.peak_memory_mib} MiB)")


def _set(intent: Mapping[str, str]) -> str:
    return _bounded("KGWE rightsizing: set " + " ".join(f"{k}={v}" for k, v in intent.items()))


def _bounded(text: str) -> str:
    return text if len(text) <= MAX_WARNING_CHARS else text[: MAX_WARNING_CHARS - 3] + "..."


def advise(mode: RightsizingMode, usage: UsageRow | None, notes: Mapping[str, str], intent: PodIntent,
           demand: GpuDemand, settings: Rightsizing, *, decided_by_template: bool) -> Advice:
    """What `mode` does to a pod with these annotations, intent and GPU demand, given its workload's usage.
    `decided_by_template`: the pod was made from a template KGWE admitted, which rightsizing already saw
    (SPEC section 7: such a pod passes unchanged); it gets neither warning nor rewrite."""
    if mode == "off" or usage is None or decided_by_template or opted_out(notes):
        return Advice()
    rec = usage.recommendation
    if rec is None or not rec.change or keys.RIGHTSIZED_FROM in notes:
        return Advice()
    if rec.gpus != rec.asks.gpus:
        # KGWE never changes a pod's GPU count: a program started for 4 GPUs may not run on 2.
        return Advice([_saving(usage), f"KGWE rightsizing: {rec.gpus} GPU(s) instead of {rec.asks.gpus} would do"])
    suggestion = [_saving(usage), _set(rec.intent)]
    if mode == "recommend":
        return Advice(suggestion)
    reason = _not_automatic(rec.confidence, intent, demand, rec.asks.gpus, settings)
    if reason is not None:
        return Advice([*suggestion, _bounded(f"KGWE rightsizing not applied: {reason}")])
    asked = {k: notes[k] for k in SIZING_KEYS if k in notes}
    record = orjson.dumps({"asked": asked, "shape": rec.asks.shape}, option=orjson.OPT_SORT_KEYS).decode()
    if len(record) > MAX_RECORD_CHARS:
        return Advice([*suggestion, "KGWE rightsizing not applied: what was asked is too long to record"])
    changes: dict[str, str | None] = dict.fromkeys(SIZING_KEYS)
    changes.update(rec.intent)
    changes[keys.RIGHTSIZED_FROM] = record
    applied = _bounded(f"KGWE rightsizing: {rec.shape} instead of {rec.asks.shape} (was: {keys.RIGHTSIZED_FROM})")
    return Advice([applied, _saving(usage)], changes)


def _not_automatic(confidence: float, intent: PodIntent, demand: GpuDemand, asked_gpus: int,
                   settings: Rightsizing) -> str | None:
    """Why `auto` only warns for this pod, or None when it may rewrite it."""
    if confidence < settings.auto_min_confidence:
        return f"confidence {confidence:g} < rightsizing.autoMinConfidence {settings.auto_min_confidence:g}"
    if intent.problems or demand.invalid:
        return "the pod's intent is not valid"
    if intent.gang:
        return "a gang's members must agree on their GPUs"
    if demand.mig or demand.other or demand.whole_gpus != asked_gpus:
        return f"this pod asks other GPUs than the workload's pods did ({asked_gpus} whole GPU(s))"
    return None


def rightsized_pod(pod: dict[str, Any], changes: Mapping[str, str | None]) -> None:
    """Apply `changes` to the pod's annotations in place (a mutation step's body)."""
    metadata = pod.get("metadata")
    if not isinstance(metadata, dict):
        metadata = pod["metadata"] = {}
    notes = metadata.get("annotations")
    if not isinstance(notes, dict):
        notes = metadata["annotations"] = {}
    for key, value in changes.items():
        if value is None:
            notes.pop(key, None)
        elif notes.get(key) != value:
            notes[key] = value


def not_applied(usage: UsageRow, problem: str) -> list[str]:
    """The warnings of an `auto` rewrite taken back because the rewritten pod would not pass."""
    rec = usage.recommendation
    found = [_saving(usage), _set(rec.intent)] if rec is not None else []
    return [*found, _bounded(f"KGWE rightsizing not applied: {problem}")]


def rightsizing_step(changes: Mapping[str, str | None]) -> Step:
    """The mutation step of an `auto` rewrite."""
    wanted = dict(changes)
    return RIGHTSIZING_MUTATOR.step(lambda pod: rightsized_pod(pod, wanted))
