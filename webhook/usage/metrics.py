"""The usage metrics `/metrics` shows (SPEC section 11), set from each complete report (pure setters)."""

from __future__ import annotations

from decimal import Decimal

from prometheus_client import Gauge

from webhook.usage.views import UsageReport

RECOMMENDED_WORKLOADS = Gauge(
    "kgwe_recommendation_workloads",
    "Workloads with a recommendation from their GPU usage, by whether it changes what they ask (change: true|false)",
    ["change"], multiprocess_mode="livemax",
)
RECOMMENDATION_SAVED_GPUS = Gauge(
    "kgwe_recommendation_gpu_equivalents_saved",
    "GPU-equivalents the recommendations would free, for the pods holding GPUs now, by namespace",
    ["namespace"], multiprocess_mode="livemax",
)
RECOMMENDATION_SAVED_MONEY = Gauge(
    "kgwe_recommendation_hourly_savings",
    "Money per hour the recommendations would save (pricing currency), for the pods holding GPUs now, by namespace",
    ["namespace"], multiprocess_mode="livemax",
)
IDLE_GPUS = Gauge(
    "kgwe_idle_gpus",
    "GPU-equivalents held by pods whose GPUs stayed below rightsizing.idleBelow for rightsizing.idleFor",
    ["namespace", "tenant"], multiprocess_mode="livemax",
)


def export(report: UsageReport) -> None:
    """Replace the usage series with the report's (a report of every namespace)."""
    changes = {"true": 0, "false": 0}
    saved: dict[str, Decimal] = {}
    money: dict[str, Decimal] = {}
    for found in report.recommendations:
        changes["true" if found.change else "false"] += 1
        namespace = found.workload.namespace
        saved[namespace] = saved.get(namespace, Decimal(0)) + found.equivalents_saved_per_pod * found.pods_now
        per_pod = found.hourly_saved_per_pod
        if per_pod is not None:
            money[namespace] = money.get(namespace, Decimal(0)) + per_pod * found.pods_now
    idle: dict[tuple[str, str], float] = {}
    for row in report.idle:
        idle[(row.namespace, row.tenant)] = idle.get((row.namespace, row.tenant), 0.0) + row.gpu_equivalents
    for gauge in (RECOMMENDATION_SAVED_GPUS, RECOMMENDATION_SAVED_MONEY, IDLE_GPUS):
        gauge.clear()
    for change, count in changes.items():
        RECOMMENDED_WORKLOADS.labels(change).set(count)
    for namespace, value in saved.items():
        RECOMMENDATION_SAVED_GPUS.labels(namespace).set(float(value))
    for namespace, value in money.items():
        RECOMMENDATION_SAVED_MONEY.labels(namespace).set(float(value))
    for (namespace, tenant), gpus in idle.items():
        IDLE_GPUS.labels(namespace, tenant).set(gpus)
