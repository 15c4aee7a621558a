"""A pod's usage history as KGWE reads it, and the one function that reads it from Prometheus.

The history of a pod is its per-window values on one aligned grid (promql.Grid): the peak memory of its
busiest GPU, for pods of several GPUs the sum of their peaks, and its highest engine activity; plus what
the exporter says it held (model, MIG profile, how many devices, where). Nothing is kept between reads:
Prometheus is the store.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from webhook.config import Usage
from webhook.usage import promql
from webhook.usage.prometheus import PrometheusClient, Series

PodKey = tuple[str, str]  # (namespace, pod)


@dataclass
class PodDevices:
    """What the DCGM exporter saw a pod hold: devices per (model, MIG profile), and the host."""

    models: dict[tuple[str, str], int] = field(default_factory=dict)  # (modelName, GPU_I_PROFILE) -> devices
    host: str = ""

    @property
    def count(self) -> int:
        return sum(self.models.values())

    def main_model(self) -> tuple[str, str]:
        """The (model, MIG profile) it held most of (name order breaks ties: the same answer every time)."""
        return max(sorted(self.models), key=lambda k: self.models[k]) if self.models else ("", "")


@dataclass
class PodHistory:
    namespace: str
    pod: str
    memory: dict[float, float] = field(default_factory=dict)  # window end -> MiB on its busiest GPU
    total: dict[float, float] = field(default_factory=dict)  # window end -> MiB summed over its GPUs (>1 GPU)
    activity: dict[float, float] = field(default_factory=dict)  # window end -> 0..1, its busiest GPU
    devices: PodDevices = field(default_factory=PodDevices)

    @property
    def key(self) -> PodKey:
        return (self.namespace, self.pod)

    @property
    def first(self) -> float | None:
        return min(self.memory) if self.memory else None

    @property
    def last(self) -> float | None:
        return max(self.memory) if self.memory else None


@dataclass
class UsageHistory:
    grid: promql.Grid
    pods: dict[PodKey, PodHistory] = field(default_factory=dict)
    queries: int = 0  # how many queries it took (bounded by the chunks, never by the pods)

    def pod(self, labels: dict[str, str]) -> PodHistory | None:
        namespace, name = labels.get("namespace", ""), labels.get("pod", "")
        if not name:
            return None
        key = (namespace, name)
        found = self.pods.get(key)
        if found is None:
            found = self.pods[key] = PodHistory(namespace, name)
        return found


def read_history(client: PrometheusClient, usage: Usage, end: float, namespace: str | None = None) -> UsageHistory:
    """Every pod's history over `usage.lookback` up to `end` (unix time), in chunked range queries plus one
    instant query for the devices; raises PrometheusUnavailable when Prometheus cannot answer."""
    interval = usage.interval_seconds
    grid = promql.Grid.ending(end, usage.lookback_seconds, interval)
    history = UsageHistory(grid)
    ranged: list[tuple[str, Callable[[PodHistory], dict[float, float]]]] = [
        (promql.memory_peak(interval, namespace), lambda p: p.memory),
        (promql.memory_total(interval, namespace), lambda p: p.total),
        (promql.engine_activity(interval, namespace), lambda p: p.activity),
    ]
    for start, stop in grid.chunks(usage.chunk_seconds):
        for query, target in ranged:
            _fold(history, client.query_range(query, start, stop, grid.step), target)
            history.queries += 1
    lookback = grid.end - grid.start + grid.step
    for series in client.query(promql.devices(lookback, namespace), grid.end):
        pod = history.pod(series.labels)
        if pod is None or not series.points:
            continue
        key = (series.labels.get("modelName", "").strip(), series.labels.get("GPU_I_PROFILE", ""))
        pod.devices.models[key] = pod.devices.models.get(key, 0) + int(series.points[0][1])
        pod.devices.host = pod.devices.host or series.labels.get("Hostname") or series.labels.get("hostname", "")
    history.queries += 1
    # A pod seen only by the device query (no memory in the windows read) has no history to size from.
    history.pods = {k: p for k, p in history.pods.items() if p.memory}
    return history


def _fold(history: UsageHistory, answer: list[Series], target: Callable[[PodHistory], dict[float, float]]) -> None:
    for series in answer:
        pod = history.pod(series.labels)
        if pod is None:
            continue
        values = target(pod)
        for moment, value in series.points:
            values[moment] = max(value, values.get(moment, value))
