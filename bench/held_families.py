"""The per-pod cost families as prometheus_client's own `GaugeMetricFamily` holds them: every sample made before
the first line is rendered, as a scrape did before the families were sampled as read
(webhook/controllers/lazy_gauge.py). The baseline bench_peaks.py measures against, and what
tests/server/test_metrics_parts.py holds the lazy families' text to."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from webhook.controllers.bound_pods import SERIES_LABELS, HourlyCostCollector


class HeldFamilies(Collector):
    """`collector`'s families, each sample held."""

    def __init__(self, collector: HourlyCostCollector) -> None:
        self.collector = collector

    def collect(self) -> Iterator[Metric]:
        values = (lambda v: v.hourly, lambda v: v.allocation, lambda v: v.whole)
        for lazy, value in zip(self.collector.collect(), values, strict=True):
            family = GaugeMetricFamily(lazy.name, lazy.documentation, labels=SERIES_LABELS)
            for labels, series in sorted(self.collector._series.items()):
                family.add_metric(list(labels), float(value(series)))
            yield family
