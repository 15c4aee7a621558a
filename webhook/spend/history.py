"""Spend read from Prometheus (the I/O of Prometheus mode): KGWE's per-pod cost series integrated over a
window (promql.py), and idle time from the DCGM exporter's series. A handful of instant queries per
window, aggregated by pod inside Prometheus: the number of queries never grows with the pods."""

from __future__ import annotations

from decimal import Decimal

from webhook.spend import promql
from webhook.spend.ledger import PodSpend
from webhook.spend.rates import Owner
from webhook.spend.window import Window
from webhook.usage.prometheus import PrometheusClient, Series

ZERO = Decimal(0)
PodKey = tuple[str, str]


def _value(series: Series) -> Decimal:
    return Decimal(repr(series.points[-1][1])) if series.points else ZERO


def _key(labels: dict[str, str]) -> tuple[str, ...]:
    return tuple(labels.get(name, "") for name in promql.POD_LABELS)


def prometheus_spend(client: PrometheusClient, window: Window, step: float) -> list[PodSpend]:
    """Every pod's spend within the window, as KGWE exported it."""
    at = window.end - promql.EPSILON
    seconds = Decimal(f"{step:g}")
    spends: dict[tuple[str, ...], PodSpend] = {}

    def spend(labels: dict[str, str]) -> PodSpend:
        key = _key(labels)
        found = spends.get(key)
        if found is None:
            run = Owner(labels["run_kind"], labels["run"]) if labels.get("run_kind") and labels.get("run") else None
            found = spends[key] = PodSpend(
                namespace=labels.get("namespace", ""), pod=labels.get("pod", ""), tenant=labels.get("tenant", ""),
                type_id=labels.get("accelerator_type", ""), share=labels.get("share", "") or "whole",
                workload=Owner(labels.get("workload_kind", "") or "Pod", labels.get("workload", "") or
                               labels.get("pod", "")), run=run,
            )
        return found

    for series in client.query(promql.integral(promql.HOURLY_COST, window.seconds, step), at):
        spend(series.labels).cost_seconds += _value(series) * seconds
    for series in client.query(promql.integral(promql.GPU_ALLOCATION, window.seconds, step), at):
        spend(series.labels).gpu_seconds += _value(series) * seconds
    for series in client.query(promql.integral(promql.WHOLE_GPU_COST, window.seconds, step), at):
        spend(series.labels).whole_seconds += _value(series) * seconds
    for series in client.query(promql.points(window.seconds, step), at):
        spend(series.labels).seconds += _value(series) * seconds
    for series in client.query(promql.first_seen(window.seconds, step), at):
        first = float(_value(series))
        found = spend(series.labels)
        found.start = first if found.start is None else min(found.start, first)
    latest = window.end - step
    for series in client.query(promql.last_seen(window.seconds, step), at):
        last = float(_value(series))
        # Exported at the window's last step: still running then. Else it ended one step after its last point.
        spend(series.labels).end = None if last >= latest - 1e-6 else last + step
    return [s for s in spends.values() if s.seconds > 0]


def prometheus_buckets(client: PrometheusClient, window: Window, step: float) -> dict[str, list[Decimal]]:
    """Per tenant, money x seconds in each bucket of the window (window.buckets())."""
    buckets = window.buckets()
    out: dict[str, list[Decimal]] = {}
    seconds = Decimal(f"{step:g}")
    whole = [b for b in buckets if b[1] - b[0] == window.bucket_seconds]
    if whole:
        first_end = whole[0][1] - promql.EPSILON
        answer = client.query_range(promql.tenant_buckets(window.bucket_seconds, step), first_end,
                                    window.end - promql.EPSILON, window.bucket_seconds)
        offset = len(buckets) - len(whole)
        for series in answer:
            row = out.setdefault(series.labels.get("tenant", ""), [ZERO] * len(buckets))
            for moment, value in series.points:
                index = offset + round((moment + promql.EPSILON - whole[0][1]) / window.bucket_seconds)
                if 0 <= index < len(buckets):
                    row[index] = Decimal(repr(value)) * seconds
    if len(whole) < len(buckets):  # a first, shorter bucket: one instant query of its own
        start, end = buckets[0]
        for series in client.query(promql.tenant_buckets(end - start, step), end - promql.EPSILON):
            row = out.setdefault(series.labels.get("tenant", ""), [ZERO] * len(buckets))
            row[0] = _value(series) * seconds
    return out


def idle_usage(client: PrometheusClient, window: Window, step: float, idle_below: float) -> dict[PodKey, Decimal]:
    """Per pod whose usage is known in the window: seconds its GPUs stayed below `idle_below`."""
    at = window.end - promql.EPSILON
    seconds = Decimal(f"{step:g}")
    known = {
        (s.labels.get("namespace", ""), s.labels.get("pod", ""))
        for s in client.query(promql.known_points(window.seconds, step), at) if _value(s) > 0
    }
    out: dict[PodKey, Decimal] = dict.fromkeys(known, ZERO)
    for series in client.query(promql.idle_points(window.seconds, step, idle_below), at):
        key = (series.labels.get("namespace", ""), series.labels.get("pod", ""))
        if key in out:
            out[key] = _value(series) * seconds
    return out
