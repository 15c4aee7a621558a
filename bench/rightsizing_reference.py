"""The recommendation maths as first written (kept verbatim as a reference): the in-run baseline of
bench/bench_rightsizing.py and the answer tests/usage/test_recommend_fast.py compares the fast code with.

Per workload it decays every window on its own (`0.5 ** age`), builds (value, weight) pairs and sorts
them; per pod it sorts the windows of the idle stretch. Same inputs (the
shared weights ignored) and outputs as webhook.usage.recommend.recommend and webhook.usage.idle.idle_pod.
"""

from __future__ import annotations

from webhook.config import Rightsizing
from webhook.usage.decay import decayed, percentile
from webhook.usage.history import PodHistory
from webhook.usage.idle import IdlePod
from webhook.usage.recommend import Pooled, Recommendation, _smaller, _usual
from webhook.usage.shapes import Need, Shape, fitting, smallest


def recommend(pooled: Pooled, shapes: list[Shape], vendor_of: dict[str, str], settings: Rightsizing,
              step: float, newest: float, _decay: object = None) -> Recommendation | None:
    first = min(p.first for p in pooled.pods if p.first is not None)
    last = max(p.last for p in pooled.pods if p.last is not None)
    span = last - first + step
    if span < settings.min_history_seconds - 1e-6:
        return None
    ask = _usual(pooled.asks)
    half_life = settings.half_life_seconds
    memory = [(t, v) for p in pooled.pods for t, v in p.memory.items()]
    peak = max(v for _t, v in memory)
    usual = percentile(decayed(memory, newest, half_life), settings.memory_percentile) or peak
    margin = 1 + settings.memory_margin
    target = max(usual, peak) * margin
    several = ask.shape.gpus > 1
    totals = [(t, p.total.get(t, v)) for p in pooled.pods for t, v in p.memory.items()] if several else []
    peak_total = max((v for _t, v in totals), default=None)
    activity_samples = [(t, v) for p in pooled.pods for t, v in p.activity.items()]
    activity = percentile(decayed(activity_samples, newest, half_life), settings.activity_percentile)
    notes: list[str] = []
    if activity is None:
        notes.append("no engine activity exported (DCGM_FI_PROF_GR_ENGINE_ACTIVE or DCGM_FI_DEV_GPU_UTIL): "
                     "sized by memory alone")
    busy = (activity or 0.0) * (ask.shape.compute if ask.shape.kind == "mig" else 1.0)
    need = Need(target, (peak_total or peak) * margin, min(1.0, busy), ask.shape.gpus)
    vendor = vendor_of.get(ask.shape.type_id)
    best = smallest([*fitting(shapes, need, vendor_of, vendor)])
    recommended = ask.shape
    if best is None:
        notes.append("no shape of this cluster holds the peak plus the margin: keep what it asks")
    elif _smaller(best, ask.shape):
        recommended = best
    windows = {t for p in pooled.pods for t in p.memory}
    coverage = min(1.0, len(windows) * step / span)
    confidence = round(min(1.0, span / (3 * settings.min_history_seconds)) * coverage, 2)
    if pooled.workload.source == "name":
        notes.append("workload inferred from pod names (the pods are no longer in the cluster)")
    return Recommendation(
        workload=pooled.workload, pods=len(pooled.pods),
        pods_now=sum(1 for p in pooled.pods if p.last is not None and p.last >= newest),
        ask=ask, history_seconds=span, peak_mib=peak, percentile_mib=usual, target_mib=target,
        peak_total_mib=peak_total, activity=activity, recommended=recommended, confidence=confidence,
        notes=tuple(notes),
    )


def idle_pod(pod: PodHistory, settings: Rightsizing, newest: float, step: float) -> IdlePod | None:
    if pod.last is None or pod.last < newest or pod.first is None:
        return None
    needed = settings.idle_for_seconds
    windows = sorted((t for t in pod.memory if t > newest - needed), reverse=True)
    if pod.first > newest - needed + step + 1e-6:
        return None
    expected = max(1, round(needed / step))
    if len(windows) < expected:
        return None
    highest = 0.0
    for moment in windows:
        value = pod.activity.get(moment)
        if value is None or value >= settings.idle_below:
            return None
        highest = max(highest, value)
    stretch = len(windows)
    for moment in sorted((t for t in pod.memory if t <= newest - needed), reverse=True):
        value = pod.activity.get(moment)
        if value is None or value >= settings.idle_below or moment != newest - stretch * step:
            break
        highest = max(highest, value)
        stretch += 1
    return IdlePod(pod, stretch * step, highest)
