"""The PromQL of costs over time (pure text). Every query reads KGWE's own per-pod series
(webhook/controllers/bound_pods.py) and integrates them on a subquery grid: `sum_over_time(X[W:step])`
is the sum of X at every step of the window, each point standing for one step of time, so
money x seconds = that sum x step. The grid is aligned to the step (Prometheus aligns subqueries to
absolute multiples of it), and every query is evaluated 1 ms before the window's end, so the points are
`start, start + step, ..., end - step`: the window `[start, end)` exactly, whatever Prometheus' version
does with range edges.

X first takes `max by` the pod's labels without `instance`, `job` and `node`: a series scraped from two
replicas during a leader change, or relabelled when the pod was bound, is one pod, never charged twice.
"""

from __future__ import annotations

from webhook.usage.promql import ENGINE_ACTIVE, GPU_UTIL

HOURLY_COST = "kgwe_pod_hourly_cost"
GPU_ALLOCATION = "kgwe_pod_gpu_allocation"
WHOLE_GPU_COST = "kgwe_pod_whole_gpu_hourly_cost"
# What a pod's spend is grouped by; `container` summed (a pod's containers add up to the pod).
POD_LABELS = ("namespace", "pod", "tenant", "accelerator_type", "share", "workload_kind", "workload",
              "run_kind", "run")
# The moment before the window's end at which queries are evaluated (see above).
EPSILON = 0.001


def _duration(seconds: float) -> str:
    return f"{max(1, round(seconds))}s"


def per_pod(metric: str) -> str:
    labels = ", ".join(POD_LABELS)
    return f"sum by ({labels}) (max by ({labels}, container) ({metric}))"


def integral(metric: str, window: float, step: float) -> str:
    """Per pod: the metric summed at every step of the window (x step = its integral in metric x seconds)."""
    return f"sum_over_time(({per_pod(metric)})[{_duration(window)}:{_duration(step)}])"


def points(window: float, step: float) -> str:
    """Per pod: how many steps of the window it was exported (x step = seconds it ran)."""
    return f"count_over_time(({per_pod(HOURLY_COST)})[{_duration(window)}:{_duration(step)}])"


def first_seen(window: float, step: float) -> str:
    return f"min_over_time(timestamp({per_pod(HOURLY_COST)})[{_duration(window)}:{_duration(step)}])"


def last_seen(window: float, step: float) -> str:
    return f"max_over_time(timestamp({per_pod(HOURLY_COST)})[{_duration(window)}:{_duration(step)}])"


def _activity() -> str:
    """A pod's busiest GPU's engine activity (0..1), GPU_UTIL (%) where the profiling metric is missing."""
    return (f'(max by (namespace, pod) ({ENGINE_ACTIVE}{{pod!=""}})'
            f' or max by (namespace, pod) ({GPU_UTIL}{{pod!=""}}) / 100)')


def idle_points(window: float, step: float, idle_below: float) -> str:
    """Per pod: the steps at which all its GPUs were below `idle_below` (`< bool` keeps the busy ones as 0)."""
    return f"sum_over_time(({_activity()} < bool {idle_below:g})[{_duration(window)}:{_duration(step)}])"


def tenant_buckets(bucket: float, step: float) -> str:
    """Per tenant: the cost series summed over one bucket (x step = money x seconds), for a range query."""
    return (f"sum by (tenant) (sum_over_time(({per_pod(HOURLY_COST)})[{_duration(bucket)}:{_duration(step)}]))")


def known_points(window: float, step: float) -> str:
    """Per pod: the steps at which its usage is known at all."""
    return f"count_over_time({_activity()}[{_duration(window)}:{_duration(step)}])"
