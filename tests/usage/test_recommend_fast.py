"""The fast recommendation maths gives the answers of the maths as first written (bench/rightsizing_reference.py),
bit for bit: the decaying percentile on its own, and whole reports (recommendations and idle pods) of generated
histories with replicas, gaps, windows off the grid, ties, idle and several-GPU pods. And never below a peak."""

from __future__ import annotations

import random
from itertools import pairwise
from pathlib import Path
from unittest import mock

import pytest
import rightsizing_reference as reference
from hypothesis import given, settings
from hypothesis import strategies as st

from webhook import assembly
from webhook.cluster.model import ClusterModel
from webhook.config import Config, load_config, parse_config
from webhook.usage import views
from webhook.usage.decay import Decay, decayed, percentile, weighted_percentile
from webhook.usage.history import PodHistory, UsageHistory
from webhook.usage.promql import Grid

ROOT = Path(__file__).resolve().parents[2]

_value = st.one_of(st.sampled_from([0.0, 1.0, 2.0, 0.01, 14210.0]), st.floats(0, 1e5, allow_nan=False))
_weight = st.one_of(st.sampled_from([0.0, 0.5, 1.0]), st.floats(0, 4, allow_nan=False))


@settings(max_examples=400, deadline=None)
@given(st.lists(st.tuples(_value, _weight), min_size=0, max_size=60),
       st.sampled_from([0.98, 0.95, 0.5, 1.0, 0.1, 0.999]))
def test_weighted_percentile_is_the_percentile_of_the_pairs(pairs: list[tuple[float, float]], share: float) -> None:
    values, weights = [v for v, _ in pairs], [w for _, w in pairs]
    expected = percentile(pairs, share)
    assert repr(weighted_percentile(values, weights, share)) == repr(expected)
    if all(a <= b for a, b in pairwise(weights)):
        assert repr(weighted_percentile(values, weights, share, ascending=True)) == repr(expected)


def test_ties_add_their_weights_in_the_pairs_order() -> None:
    """Equal values sum their weights smallest first, as sorted pairs do: the total, and so the threshold, can
    depend on it (20,000 ones added after 2**53 are lost, before it they are not)."""
    values = [1.0] + [2.0] * 20_001
    weights = [1.0, 2.0**53] + [1.0] * 20_000
    share = 2.0**-53
    assert percentile(list(zip(values, weights, strict=True)), share) == 2.0
    assert weighted_percentile(values, weights, share) == 2.0
    assert weighted_percentile(values, weights, share, ascending=True) == 1.0  # the sort by weight matters


def test_decay_weights_are_those_of_decayed_on_and_off_the_grid() -> None:
    grid = Grid.ending(1_800_000_000.0, 26 * 3600.0, 300.0)
    decay = Decay(grid.end, 86400.0, grid.start, grid.step)
    on = {grid.start + i * grid.step: float(i) for i in range(5, grid.points)}
    off = {grid.start + 7.5: 1.0, grid.end: 2.0, grid.start: 3.0}
    for windows in (on, off, {}):
        series = decay.series(windows)
        assert series.weights == [w for _v, w in decayed(windows.items(), grid.end, 86400.0)]
        assert series.values == list(windows.values())
    assert decay.series(on).ascending and not decay.series(off).ascending


@pytest.fixture(scope="module")
def example() -> tuple[Config, ClusterModel]:
    config = load_config(ROOT / "examples" / "config.yaml")
    return config, assembly.from_directory(config, ROOT / "examples" / "cluster").runtime.store.snapshot()


MODELS = [("NVIDIA H100 80GB HBM3", ""), ("NVIDIA A100-SXM4-80GB", ""), ("NVIDIA A100-SXM4-80GB", "3g.40gb"),
          ("NVIDIA L4", ""), ("NVIDIA GB200", "")]


def _history(seed: int, pods: int = 120) -> UsageHistory:
    """Pods of workloads with replicas (StatefulSets `web<n>` of 3 pods), pods of the example cluster,
    young pods, pods with gaps and windows off the grid, memory in whole MiB (ties), idle pods, pods without
    activity and pods of several GPUs."""
    rng = random.Random(seed)
    grid = Grid.ending(1_800_000_000.0, 30 * 3600.0, 300.0)
    history = UsageHistory(grid)
    names = [("team-a", "train-llm-0"), ("inference", "notebook-1"), ("team-a", "batch-done")]
    names += [(f"ns-{i // 3 % 3}", f"web{i // 3}-{i % 3}") for i in range(pods)]  # StatefulSets of 3
    for namespace, name in names:
        pod = PodHistory(namespace, name)
        model, profile = rng.choice(MODELS)
        gpus = rng.choice([1, 1, 1, 2, 4]) if not profile else 1
        pod.devices.models[(model, profile)] = gpus
        pod.devices.host = f"node-{rng.randrange(4)}"
        start = rng.choice([0, 0, 0, rng.randrange(grid.points)])
        stop = grid.points if rng.random() < 0.8 else rng.randrange(start + 1, grid.points + 1)
        idle, whole, quiet = rng.random() < 0.2, rng.random() < 0.5, rng.random() < 0.1
        base = rng.uniform(1000, 90000)
        for step in range(start, stop):
            if rng.random() < 0.03:
                continue  # a gap
            moment = grid.start + step * grid.step + (1.5 if rng.random() < 0.01 else 0.0)
            used = base * rng.uniform(0.8, 1.05)
            pod.memory[moment] = float(round(used)) if whole else used
            if gpus > 1:
                pod.total[moment] = pod.memory[moment] * rng.uniform(1, gpus)
            if not quiet:
                pod.activity[moment] = rng.choice([0.0, 0.01, 0.02]) if idle else rng.choice([rng.random(), 0.5])
        if pod.memory:
            history.pods[pod.key] = pod
    return history


def _reference_report(history: UsageHistory, model: ClusterModel, config: Config) -> views.UsageReport:
    with mock.patch.object(views, "recommend", reference.recommend), \
            mock.patch.object(views, "idle_pod", reference.idle_pod):
        return views.build_report(history, model, config)


@pytest.mark.parametrize("seed", range(6))
def test_reports_are_those_of_the_reference(seed: int, example: tuple[Config, ClusterModel]) -> None:
    config, model = example
    if seed % 2:  # other settings: a short half-life (weights underflow to 0), the whole history idle
        config = config.model_copy(update={"rightsizing": parse_config(
            "rightsizing: {halfLife: 20m, memoryPercentile: 0.5, activityPercentile: 1.0, idleFor: 30h}").rightsizing})
    history = _history(seed)
    fast, slow = views.build_report(history, model, config), _reference_report(history, model, config)
    assert fast.recommendations and slow.without_history == fast.without_history
    assert repr(fast.recommendations) == repr(slow.recommendations)
    assert fast.recommendations == slow.recommendations and fast.idle == slow.idle
    assert any(r.pods > 1 for r in fast.recommendations) and any(r.change for r in fast.recommendations)
    for found in fast.recommendations:  # never below a peak seen
        assert found.target_mib >= found.peak_mib
        assert found.recommended.memory_mib * found.recommended.gpus >= found.peak_mib or not found.change
