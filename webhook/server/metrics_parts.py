"""The `/metrics` text of one process in parts, never joined (issue 36).

`generate_latest` writes every line of every family into one list, joins it into one string and encodes that: at
10,000 GPU nodes (the per-pod cost series, lazy_gauge.py) a 54 MiB answer held the lines, the string and the bytes at
once, about 180 MiB above the worker's heap. Here each family is rendered by `generate_latest` on its own, and a
`LazyGauge`'s samples a slice at a time (the slices after the first without their HELP and TYPE lines), each part
encoded as it is made; the parts are sent one after another (pieces.py). Their concatenation is `generate_latest`'s
answer, byte for byte: it renders each family on its own and concatenates them.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import REGISTRY, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from webhook.controllers.lazy_gauge import LazyGauge

# Samples rendered together: a part of about 1 MiB of text for the per-pod cost series.
SAMPLES_PER_PART = 4096


class _Only(Collector):
    def __init__(self, metric: Metric) -> None:
        self.metric = metric

    def collect(self) -> Iterator[Metric]:
        yield self.metric


def _slice(metric: LazyGauge, start: int, stop: int) -> Metric:
    piece = Metric(metric.name, metric.documentation, metric.type, metric.unit)
    piece.samples = metric.samples[start:stop]
    return piece


def latest_parts(registry: Collector = REGISTRY, per_part: int = SAMPLES_PER_PART) -> list[bytes]:
    """`generate_latest(registry)` as parts whose concatenation it is."""
    parts: list[bytes] = []
    for metric in registry.collect():
        if not isinstance(metric, LazyGauge) or len(metric.samples) <= per_part:
            parts.append(generate_latest(_Only(metric)))
            continue
        for start in range(0, len(metric.samples), per_part):
            text = generate_latest(_Only(_slice(metric, start, start + per_part)))
            # Every slice is the same family: its HELP and TYPE lines come once, before the first slice's samples.
            parts.append(text if start == 0 else text.split(b"\n", 2)[2])
    return parts
