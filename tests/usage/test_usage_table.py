"""The usage table admission and policies read (webhook/usage/table.py), refreshed from a real Prometheus
loaded with DCGM series: one bounded read, every workload's row, per-node use, stale and failed refreshes."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from webhook import assembly
from webhook.cluster.model import ClusterModel
from webhook.config import Config, load_config
from webhook.usage.prometheus import PrometheusUnavailable
from webhook.usage.refresher import UsageRefresher
from webhook.usage.service import UsageService
from webhook.usage.views import recommendations_document

ROOT = Path(__file__).resolve().parents[2]
# `trace` is tests/usage/conftest.py's fixture (a real Prometheus with a generated DCGM trace); its type is not
# imported: `conftest` names another module when the workload tests run in the same session.
pytestmark = pytest.mark.timeout(600)  # the first test may wait for apt-get to install prometheus


@pytest.fixture(scope="module")
def config() -> Config:
    return load_config(ROOT / "examples" / "config.yaml")


@pytest.fixture(scope="module")
def model(config: Config) -> ClusterModel:
    return assembly.from_directory(config, ROOT / "examples" / "cluster").runtime.store.snapshot()


def test_one_refresh_fills_every_workload_and_node_in_bounded_queries(
    trace: Any, config: Config, model: ClusterModel
) -> None:
    # Read as of the trace's end: the session's trace may have been loaded minutes before this test runs.
    service = UsageService(lambda: config, lambda: model, trace.url, clock=lambda: trace.end)
    refresher = UsageRefresher(service, lambda: config, lambda: model)
    table = refresher.refresh_once()
    assert table is not None and refresher.current() is table
    history, report = service.read_all()
    assert report.queries == history.queries <= 3 * 7 + 1 + 3  # chunks of the lookback, never per pod
    document = recommendations_document(report)
    assert document["recommendations"]
    for row in document["recommendations"]:
        entry = table.workload(row["key"])
        assert entry is not None and entry.enough_history
        assert entry.peak_memory_mib == row["peakMemoryMib"]
        assert entry.recommendation is not None
        assert entry.recommendation.intent == row["recommended"]["intent"]
        assert entry.recommendation.change == row["change"]
    for key in document["withoutEnoughHistory"]:
        entry = table.workload(key)
        assert entry is not None and not entry.enough_history and entry.recommendation is None
    idle = {row.workload for row in report.idle}
    assert idle and all(table.workloads[key].idle for key in idle)
    assert not any(entry.idle for key, entry in table.workloads.items() if key not in idle)
    # Per node: what its pods used in the newest window, never more busy than the devices they hold.
    assert table.nodes
    for node in table.nodes.values():
        assert node.pods >= 1 and node.devices >= node.pods
        assert 0 <= node.busy_gpu_equivalents <= node.devices + 1e-9
        assert node.memory_used_mib > 0
        assert abs(sum(node.by_type.values()) - node.busy_gpu_equivalents) < 0.01


class _Switch:
    """A usage service whose Prometheus a test replaces (one that went down)."""

    def __init__(self, service: UsageService) -> None:
        self.service = service

    def read_all(self) -> object:
        return self.service.read_all()


def test_a_failed_refresh_keeps_the_last_table_until_it_is_stale(
    trace: Any, config: Config, model: ClusterModel
) -> None:
    now = [time.time()]
    switch = _Switch(UsageService(lambda: config, lambda: model, trace.url, clock=lambda: trace.end))
    refresher = UsageRefresher(switch, lambda: config, lambda: model, clock=lambda: now[0])  # type: ignore[arg-type]
    table = refresher.refresh_once()
    assert table is not None
    switch.service = UsageService(lambda: config, lambda: model, "http://127.0.0.1:9")
    with pytest.raises(PrometheusUnavailable):
        refresher.refresh_once()
    assert refresher.current() is table and refresher.last_error
    now[0] = table.computed_at + config.rightsizing.stale_seconds + 1
    assert refresher.current() is None


def test_without_prometheus_the_refresh_does_nothing(config: Config, model: ClusterModel) -> None:
    refresher = UsageRefresher(UsageService(lambda: config, lambda: model), lambda: config, lambda: model)
    assert refresher.refresh_once() is None
    assert refresher.current() is None
