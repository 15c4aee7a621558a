"""Recommendations per workload from its pods' pooled history (pure; SPEC section 11).

Autopilot's memory recommender on per-window peaks: the windows of every replica go into one decaying
histogram; the memory a shape must hold is the higher of its percentile (`rightsizing.memoryPercentile`)
and the highest peak seen, plus `rightsizing.memoryMargin`. Never below a peak: a recommendation that
holds less than a workload once used would be an out-of-memory error later, and a GPU's memory cannot
be overcommitted. The percentile is reported beside it (how far the peak stands above the usual). The
compute a shape must hold is the percentile (`activityPercentile`) of the busiest GPU's engine activity
per window, so a busy pod is not squeezed onto a small slice. Nothing without `minHistory` of history.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, fields
from decimal import Decimal
from operator import attrgetter

from webhook.config import Rightsizing
from webhook.usage.decay import Decay, Series, weighted_percentile
from webhook.usage.history import PodHistory, PodKey
from webhook.usage.shapes import Need, Shape, fitting, smallest
from webhook.workload_owners import WorkloadRef

HIGH_CONFIDENCE = 0.67
MEDIUM_CONFIDENCE = 0.34


@dataclass(frozen=True)
class Ask:
    """What a pod asks now, as a shape, with where that was read (`pod`: the cluster; `exporter`: DCGM)."""

    shape: Shape
    source: str

    @property
    def hourly(self) -> Decimal | None:
        return self.shape.hourly


@dataclass(frozen=True)
class Recommendation:
    workload: WorkloadRef
    pods: int  # pods seen in the history
    pods_now: int  # pods holding GPUs in the newest window
    ask: Ask
    history_seconds: float
    peak_mib: float  # highest per-window peak of one device
    percentile_mib: float  # the memory percentile of the decayed per-window peaks
    target_mib: float  # what the recommended shape must hold per device (margin included)
    peak_total_mib: float | None  # pods of several devices: the highest sum of their peaks
    activity: float | None  # the activity percentile (busiest device), None when no activity was exported
    recommended: Shape  # the ask itself when nothing smaller holds the workload
    confidence: float
    notes: tuple[str, ...]

    @property
    def change(self) -> bool:
        return self.recommended != self.ask.shape

    @property
    def equivalents_saved_per_pod(self) -> Decimal:
        return self.ask.shape.equivalents - self.recommended.equivalents if self.change else Decimal(0)

    @property
    def hourly_saved_per_pod(self) -> Decimal | None:
        if not self.change:
            return Decimal(0)
        now, then = self.ask.hourly, self.recommended.hourly
        return now - then if now is not None and then is not None else None

    @property
    def confidence_level(self) -> str:
        if self.confidence >= HIGH_CONFIDENCE:
            return "high"
        return "medium" if self.confidence >= MEDIUM_CONFIDENCE else "low"


@dataclass(frozen=True)
class Pooled:
    """A workload's pods and their asks."""

    workload: WorkloadRef
    pods: list[PodHistory]
    asks: list[Ask]


_REF_ORDER = attrgetter(*(f.name for f in fields(WorkloadRef)))
_POD_KEY = attrgetter("namespace", "pod")  # PodHistory.key


def group(histories: Iterable[PodHistory], owners: dict[PodKey, WorkloadRef],
          asks: dict[PodKey, Ask]) -> list[Pooled]:
    """The pods' histories pooled by workload (pods without an ask are left out), in workload order."""
    pooled: dict[WorkloadRef, tuple[list[PodHistory], list[Ask]]] = {}
    for pod in histories:
        ask = asks.get(pod.key)
        if ask is None:
            continue
        entry = pooled.setdefault(owners[pod.key], ([], []))
        entry[0].append(pod)
        entry[1].append(ask)
    # In WorkloadRef's order (its fields in turn, as its dataclass compares), compared as tuples in C.
    ordered = sorted(pooled.items(), key=lambda item: _REF_ORDER(item[0]))
    return [Pooled(ref, sorted(pods, key=_POD_KEY) if len(pods) > 1 else pods, asks) for ref, (pods, asks) in ordered]


def _usual(asks: list[Ask]) -> Ask:
    """The ask most of the pods make (the lowest in shape order among equals, so the same every time)."""
    if asks.count(asks[0]) == len(asks):
        return asks[0]  # the common case: every pod asks the same
    counts = Counter(asks)
    return max(sorted(counts, key=lambda a: (a.shape.describe(), a.source)), key=lambda a: counts[a])


def recommend(pooled: Pooled, shapes: list[Shape], vendor_of: dict[str, str], settings: Rightsizing,
              step: float, newest: float, decay: Decay | None = None) -> Recommendation | None:
    """The workload's recommendation, or None without enough history. `newest` is the newest window of the
    history read (the decay's reference), `step` its window length; `decay` its weights, shared by every
    workload of one read (made here when not given)."""
    if decay is None or decay.weights.newest != newest or decay.weights.half_life != settings.half_life_seconds:
        decay = Decay(newest, settings.half_life_seconds)
    pods = [p for p in pooled.pods if p.memory]
    memory = [decay.series(p.memory) for p in pods]
    first = min(series.first for series in memory)
    last = max(series.last for series in memory)
    span = last - first + step
    if span < settings.min_history_seconds - 1e-6:
        return None
    ask = _usual(pooled.asks)
    values, weights, ascending = _pooled(memory)
    peak = max(values)
    usual = weighted_percentile(values, weights, settings.memory_percentile, ascending) or peak
    margin = 1 + settings.memory_margin
    target = max(usual, peak) * margin
    several = ask.shape.gpus > 1
    # Per window the sum of a pod's GPUs' peaks (its own peak where the total is missing).
    peak_total = max((max(map(p.total.get, p.memory, p.memory.values())) for p in pods),
                     default=None) if several else None
    values, weights, ascending = _pooled([decay.series(p.activity) for p in pooled.pods if p.activity])
    activity = weighted_percentile(values, weights, settings.activity_percentile, ascending)
    notes: list[str] = []
    if activity is None:
        notes.append("no engine activity exported (DCGM_FI_PROF_GR_ENGINE_ACTIVE or DCGM_FI_DEV_GPU_UTIL): "
                     "sized by memory alone")
    # A MIG instance reports its own engines' activity: on a whole GPU the same work is busy slices/7 of
    # the time. Elsewhere (MPS included, where it is the whole GPU's) it is taken as it is.
    busy = (activity or 0.0) * (ask.shape.compute if ask.shape.kind == "mig" else 1.0)
    need = Need(target, (peak_total or peak) * margin, min(1.0, busy), ask.shape.gpus)
    vendor = vendor_of.get(ask.shape.type_id)
    best = smallest([*fitting(shapes, need, vendor_of, vendor)])
    recommended = ask.shape
    if best is None:
        notes.append("no shape of this cluster holds the peak plus the margin: keep what it asks")
    elif _smaller(best, ask.shape):
        recommended = best
    windows = memory[0].count if len(memory) == 1 else len(set().union(*(p.memory for p in pods)))
    coverage = min(1.0, windows * step / span)
    confidence = round(min(1.0, span / (3 * settings.min_history_seconds)) * coverage, 2)
    if pooled.workload.source == "name":
        notes.append("workload inferred from pod names (the pods are no longer in the cluster)")
    return Recommendation(
        workload=pooled.workload, pods=len(pooled.pods),
        pods_now=sum(1 for series in memory if series.last >= newest),
        ask=ask, history_seconds=span, peak_mib=peak, percentile_mib=usual, target_mib=target,
        peak_total_mib=peak_total, activity=activity, recommended=recommended, confidence=confidence,
        notes=tuple(notes),
    )


def _pooled(series: list[Series]) -> tuple[list[float], list[float], bool]:
    """The values of every pod's windows, their weights, and whether those are in ascending order."""
    if len(series) == 1:
        return series[0].values, series[0].weights, series[0].ascending
    values: list[float] = []
    weights: list[float] = []
    for one in series:
        values.extend(one.values)
        weights.extend(one.weights)
    return values, weights, False


def _smaller(candidate: Shape, current: Shape) -> bool:
    """True when the candidate costs less per hour (both priced), else when it holds fewer GPU-equivalents."""
    if candidate.hourly is not None and current.hourly is not None and candidate.hourly != current.hourly:
        return candidate.hourly < current.hourly
    return candidate.equivalents < current.equivalents
