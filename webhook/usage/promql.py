"""The PromQL KGWE asks Prometheus for GPU usage, and the time grid it asks on (pure: text and numbers).

Every query aggregates `by (namespace, pod)` inside Prometheus, so the number of queries depends on the
time chunks only, never on the number of pods, and each answer holds one series per pod. The series and
labels are NVIDIA's DCGM exporter's (REFERENCE Part E 1): `DCGM_FI_DEV_FB_USED` in MiB per GPU (or MIG
instance), `DCGM_FI_PROF_GR_ENGINE_ACTIVE` as 0..1, else `DCGM_FI_DEV_GPU_UTIL` in %, which DCGM never
reports for MIG instances. Samples without a `pod` label are GPUs no pod holds, which is not ours to size.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

FB_USED = "DCGM_FI_DEV_FB_USED"
ENGINE_ACTIVE = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
GPU_UTIL = "DCGM_FI_DEV_GPU_UTIL"
# Labels the device query groups by: what a pod holds (model, MIG profile) and where (both host labels:
# `Hostname` in every release, `hostname` on the exporter's main branch since 2026-05).
DEVICE_LABELS = ("namespace", "pod", "modelName", "GPU_I_PROFILE", "Hostname", "hostname")
# Prometheus refuses a range query of more points than this per series.
MAX_POINTS = 11_000
_LABEL_VALUE = re.compile(r'[\\"\n]')


def _quote(value: str) -> str:
    return '"' + _LABEL_VALUE.sub(lambda m: {"\\": "\\\\", '"': '\\"', "\n": "\\n"}[m.group(0)], value) + '"'


def selector(metric: str, namespace: str | None = None) -> str:
    """`metric{pod!=""}`, narrowed to one namespace when given (the label value quoted as PromQL wants)."""
    matchers = ['pod!=""']
    if namespace:
        matchers.append(f"namespace={_quote(namespace)}")
    return f"{metric}{{{','.join(matchers)}}}"


def duration(seconds: float) -> str:
    """A PromQL duration for whole seconds (`300s`): exact, whatever the unit it was configured in."""
    return f"{max(1, round(seconds))}s"


def memory_peak(interval: float, namespace: str | None = None) -> str:
    """Per pod and window: the highest memory any one of its GPUs held (MiB)."""
    return f"max by (namespace, pod) (max_over_time({selector(FB_USED, namespace)}[{duration(interval)}]))"


def memory_total(interval: float, namespace: str | None = None) -> str:
    """Per pod of several GPUs and window: the sum of its GPUs' peaks (MiB), an upper bound of what it held
    at once. Pods of one GPU are left out: their total is their peak."""
    used = selector(FB_USED, namespace)
    return (f"(sum by (namespace, pod) (max_over_time({used}[{duration(interval)}])))"
            f" and on (namespace, pod) (count by (namespace, pod) ({used}) > 1)")


def engine_activity(interval: float, namespace: str | None = None) -> str:
    """Per pod and window: the highest engine activity (0..1) of its GPUs; GPU_UTIL (%) where the
    profiling metric is missing (GPUs older than Volta, exporters without the PROF group)."""
    window = duration(interval)
    return (f"max by (namespace, pod) (max_over_time({selector(ENGINE_ACTIVE, namespace)}[{window}]))"
            f" or max by (namespace, pod) (max_over_time({selector(GPU_UTIL, namespace)}[{window}])) / 100")


def devices(lookback: float, namespace: str | None = None) -> str:
    """Per pod, model, MIG profile and host: how many GPUs (or MIG instances) it held over the lookback."""
    labels = ", ".join(DEVICE_LABELS)
    return f"count by ({labels}) (max_over_time({selector(FB_USED, namespace)}[{duration(lookback)}]))"


@dataclass(frozen=True)
class Grid:
    """The windows history is read on: ends at `start`, `start + step`, ... `end` (aligned to the step, so
    the same history read at any moment of one window gives the same windows)."""

    start: float
    end: float
    step: float

    @classmethod
    def ending(cls, end: float, lookback: float, step: float) -> Grid:
        step = max(1.0, float(int(step)))
        points = max(1, math.ceil(lookback / step))
        aligned = math.floor(end / step) * step
        return cls(aligned - (points - 1) * step, aligned, step)

    @property
    def points(self) -> int:
        return round((self.end - self.start) / self.step) + 1

    def chunks(self, chunk: float) -> list[tuple[float, float]]:
        """(start, end) of consecutive range queries covering the grid, each at most `chunk` long and at
        most `MAX_POINTS` points; no window is read twice."""
        per = max(1, min(MAX_POINTS, int(chunk // self.step)))
        out: list[tuple[float, float]] = []
        first = 0
        while first < self.points:
            last = min(self.points, first + per) - 1
            out.append((self.start + first * self.step, self.start + last * self.step))
            first = last + 1
        return out
