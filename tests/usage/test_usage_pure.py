"""The pure middle of the usage wing: owners, decaying percentiles, the grid, durations, idle."""

from __future__ import annotations

import pytest

from webhook.config import ConfigError, parse_config, parse_duration
from webhook.usage.decay import decayed, percentile
from webhook.usage.history import PodHistory
from webhook.usage.idle import idle_pod
from webhook.usage.promql import Grid, memory_peak
from webhook.workload_owners import workload_of


@pytest.mark.parametrize(("name", "kind", "owner", "part"), [
    ("web-7d4b9c8f6d-x2x9z", "Deployment", "web", ""),
    ("db-2", "StatefulSet", "db", ""),
    ("bert-master-0", "PyTorchJob", "bert", "master"),
    ("nightly-29410560-kq5zb", "CronJob", "nightly", ""),
    ("train-4-kq5zb", "Job", "train", ""),
    ("notebook", "Pod", "notebook", ""),
])
def test_owner_from_a_pod_name(name: str, kind: str, owner: str, part: str) -> None:
    ref = workload_of("ns", name, None)
    assert (ref.kind, ref.name, ref.part, ref.source) == (kind, owner, part, "name")


def test_owner_from_the_pod() -> None:
    pod = {"metadata": {"name": "web-5c9f-abcde", "labels": {"pod-template-hash": "5c9f"},
                        "ownerReferences": [{"kind": "ReplicaSet", "name": "web-5c9f", "controller": True}]}}
    assert workload_of("ns", "web-5c9f-abcde", pod).key == "Deployment/ns/web"
    jobset = {"metadata": {"labels": {"jobset.sigs.k8s.io/jobset-name": "llm",
                                      "jobset.sigs.k8s.io/replicatedjob-name": "workers"}}}
    assert workload_of("ns", "x", jobset).key == "JobSet/ns/llm/workers"
    assert workload_of("ns", "lonely", {"metadata": {"name": "lonely"}}).key == "Pod/ns/lonely"


def test_decayed_percentile_is_a_value_seen_and_old_windows_weigh_less() -> None:
    samples = [(0.0, 100.0)] * 10 + [(86400.0 * 3, 10.0)] * 10
    assert percentile(decayed(samples, 86400.0 * 3, 86400.0), 0.5) == 10.0
    assert percentile(decayed(samples, 86400.0 * 3, 86400.0), 0.98) == 100.0
    assert percentile([], 0.9) is None


def test_grid_is_aligned_and_chunks_cover_it_once() -> None:
    grid = Grid.ending(1_000_123.0, 86400.0, 300.0)
    assert grid.end % 300 == 0 and grid.points == 288
    chunks = grid.chunks(3600.0)
    assert chunks[0][0] == grid.start and chunks[-1][1] == grid.end
    assert sum(round((b - a) / 300) + 1 for a, b in chunks) == grid.points
    assert 'namespace="a\\"b"' in memory_peak(300.0, 'a"b')


def test_durations() -> None:
    assert parse_duration("1h30m") == 5400 and parse_duration(90) == 90
    with pytest.raises(ConfigError):
        parse_config("rightsizing: {minHistory: soon}")


def test_idle_needs_the_whole_stretch_below_the_threshold() -> None:
    settings = parse_config("rightsizing: {idleFor: 1h}").rightsizing
    pod = PodHistory("ns", "p")
    for i in range(24):  # two hours of 5-minute windows
        pod.memory[i * 300.0] = 1000.0
        pod.activity[i * 300.0] = 0.01
    newest = 23 * 300.0
    found = idle_pod(pod, settings, newest, 300.0)
    assert found is not None and found.idle_seconds == 24 * 300.0
    pod.activity[20 * 300.0] = 0.5
    assert idle_pod(pod, settings, newest, 300.0) is None
    del pod.activity[20 * 300.0]
    assert idle_pod(pod, settings, newest, 300.0) is None  # unknown is not idle
