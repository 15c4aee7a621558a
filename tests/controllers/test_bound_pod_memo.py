"""The bound-pod controller's remembered patches and rates (webhook/controllers/bound_pods.py `PatchMemo`, the
spend wing's `RateMemo`) against a fresh computation over a cluster that changes under them
(tests/fixtures/changing_cluster.py), each step through the real store: a pass patches and exports what it did
when it priced every pod, and prices only the pods that changed."""

from __future__ import annotations

import random
from pathlib import Path

from changing_cluster import changed, random_pod, step
from cluster_dirs import EXAMPLE_CONFIG, copy_example_cluster
from effort import tries
from prometheus_client import CollectorRegistry

from webhook.assembly import build_runtime
from webhook.config import load_config
from webhook.controllers.bound_pods import BoundPodController, PatchMemo, cost_series, desired_patch


def test_remembered_patches_and_series_equal_a_fresh_computation_over_a_changing_cluster(tmp_path: Path) -> None:
    config = load_config(EXAMPLE_CONFIG)
    store = build_runtime(config, copy_example_cluster(tmp_path / "cluster")).store
    store.min_rebuild_interval = 0
    controller = BoundPodController(store, config, None, registry=CollectorRegistry())
    memo = PatchMemo()
    rng = random.Random(37)
    for n in range(40):
        store.upsert(random_pod(rng, 1000 + n))
    patched = 0
    for n in range(tries(80, 300)):
        model = store.snapshot(force=True)
        kept = [(key, patch) for key, _pod, patch in memo.patches(model, config)]
        fresh = [(key, desired_patch(pod, model, config)) for key, pod in model.pods.items()]
        assert kept == fresh, f"step {n}"
        patched += sum(1 for _key, patch in fresh if patch is not None)
        controller.reconcile_once()
        assert controller.collector._series == cost_series(model.pods.values(), model, config), f"step {n}"
        step(rng, store, model, n)
    assert patched > 0
    # A node's sharing changes under its bound pods: their patches and series follow.
    for replicas in ("2", "4"):
        model = store.snapshot(force=True)
        node = model.node_objects["dgx-h100-01"]
        labels = {"nvidia.com/gpu.sharing-strategy": "time-slicing", "nvidia.com/gpu.replicas": replicas}
        store.upsert(changed(node, lambda o, labels=labels: o["metadata"].setdefault("labels", {}).update(labels)))
        model = store.snapshot(force=True)
        assert [p for _k, _pod, p in memo.patches(model, config)] == [
            desired_patch(pod, model, config) for pod in model.pods.values()]
        controller.reconcile_once()
        assert controller.collector._series == cost_series(model.pods.values(), model, config)
    # Nothing changed but one pod: it is priced again, and not every other pod (those on nodes whose facts each
    # snapshot rebuilds, a topology document's age counting, and those naming ResourceClaims are read again too).
    model = store.snapshot(force=True)
    controller.reconcile_once()
    pod = next(p for p in model.pods.values() if p["spec"].get("nodeName"))
    store.upsert({**pod, "metadata": {**pod["metadata"], "resourceVersion": "changed"}})
    controller.reconcile_once()
    assert 1 <= controller._rates.computed < len(model.pods) // 4
