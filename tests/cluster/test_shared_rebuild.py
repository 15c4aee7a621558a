"""A snapshot asked `at_least` a generation (webhook/cluster/model.py): the controllers' passes take the background
rebuild that admission shares instead of forcing one each (issue 36), and still never read a snapshot from before
the change that woke them. The quota pass is checked here; the gang pass in tests/gangs/test_gang_fresh_snapshot.py."""

from __future__ import annotations

import copy
import threading
from pathlib import Path

from cluster_dirs import EXAMPLE_CLUSTER, EXAMPLE_CONFIG, admitted, gpu_pod

from webhook.assembly import build_runtime
from webhook.cluster.model import ClusterModel, ClusterStore
from webhook.config import load_config
from webhook.quotas.controller import QuotaController

CONFIG = load_config(EXAMPLE_CONFIG)
INTERVAL = 0.3  # the store's longest pause between rebuilds in these tests


def _store() -> ClusterStore:
    store = build_runtime(CONFIG, EXAMPLE_CLUSTER, load_policies=False).store
    store.min_rebuild_interval = INTERVAL
    return store


def test_passes_asking_at_least_a_generation_share_the_background_rebuild_and_see_the_change() -> None:
    store = _store()
    before = store.snapshot(force=True)
    store.upsert(gpu_pod("late", "team-a", gpus=1))
    generation = store.generation
    assert store.snapshot() is before  # admission keeps reading the last one and wakes the rebuild
    got: list[ClusterModel] = []
    passes = [threading.Thread(target=lambda: got.append(store.snapshot(at_least=generation))) for _ in range(3)]
    for thread in passes:
        thread.start()
    for thread in passes:
        thread.join()
    first = got[0]
    assert all(model is first for model in got)  # one rebuild for every pass
    assert first.generation >= generation and "team-a/late" in first.pods
    assert store.snapshot() is first  # admission reads the same one


def test_a_snapshot_already_as_new_as_asked_is_answered_at_once() -> None:
    store = _store()
    model = store.snapshot(force=True)
    generation = store.generation
    store.upsert(gpu_pod("later", "team-a", gpus=1))  # newer than what is asked: not waited for
    assert store.snapshot(at_least=generation) is model


def test_a_pass_that_waited_its_bound_builds_the_snapshot_itself() -> None:
    """The background rebuild may fail or be late: after `wait` the pass builds one itself."""
    store = _store()
    before = store.snapshot(force=True)
    store.upsert(gpu_pod("late", "team-a", gpus=1))
    model = store.snapshot(at_least=store.generation, wait=0.0)
    assert model is not before and "team-a/late" in model.pods
    assert model.built_at - before.built_at < INTERVAL  # not the background's, which waits its interval


def test_a_quota_pass_sees_the_change_that_woke_it(tmp_path: Path) -> None:
    """team-a may use 8 H100s and `train-llm-0` runs on 4: a gated pod asking 5 waits. The running pod ends, and
    the pass that the change wakes releases the waiting pod, though admission's snapshot is still the one before."""
    store = _store()
    controller = QuotaController(store, CONFIG, None)
    controller.task.signal_stop()  # the passes are this test's own: the store's changes start none on a thread
    asking = gpu_pod("wants-five", "team-a", gpus=5, annotations={"kgwe.io/accelerator": "nvidia-h100-80gb"})
    store.upsert(admitted(CONFIG, asking, "2026-11-29T00:00:00Z"))
    assert "team-a/wants-five" in controller.reconcile_once().waiting
    before = store.snapshot()
    running = copy.deepcopy(store.snapshot().pods["team-a/train-llm-0"])
    running["status"] = {"phase": "Succeeded"}
    store.upsert(running)
    assert store.snapshot() is before  # what admission reads until the background rebuild
    result = controller.reconcile_once()
    assert [key for key, _type in result.released] == ["team-a/wants-five"]
