"""The bound-pod controller's state kept between passes (webhook/controllers/followed_pods.py `FollowedPods`, with
the spend wing's `RateMemo`) against a fresh computation over a cluster that changes under it
(tests/fixtures/changing_cluster.py), each step through the real store: a pass wants the patches and exports the
series it would if it read every pod, and reads only the pods that changed."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
from changing_cluster import changed, random_pod, step
from cluster_dirs import EXAMPLE_CONFIG, copy_example_cluster
from effort import tries
from prometheus_client import CollectorRegistry

from webhook.assembly import build_runtime
from webhook.cluster.model import ClusterModel
from webhook.config import Config, load_config
from webhook.controllers.bound_pods import BoundPodController, _with_annotations, cost_series, desired_patch


def _fresh_patches(model: ClusterModel, config: Config) -> dict[str, Any]:
    return {key: patch for key, pod in model.pods.items() if (patch := desired_patch(pod, model, config)) is not None}


def _check(controller: BoundPodController, model: ClusterModel, config: Config, n: object) -> None:
    controller.reconcile_once()
    wanted = _fresh_patches(model, config)
    assert controller._followed.wanting == wanted, f"step {n}"
    # A patch sent (never landing here) is laid over its pod until the pod changes: the series read it.
    laid = controller.patch_pod is not None
    pods = [_with_annotations(pod, wanted[key].annotations) if laid and key in wanted else pod
            for key, pod in model.pods.items()]
    assert controller.collector._series == cost_series(pods, model, config), f"step {n}"


@pytest.mark.parametrize("patching", [False, True], ids=["exporting", "patching"])
def test_kept_patches_and_series_equal_a_fresh_computation_over_a_changing_cluster(tmp_path: Path,
                                                                                    patching: bool) -> None:
    config = load_config(EXAMPLE_CONFIG)
    store = build_runtime(config, copy_example_cluster(tmp_path / "cluster")).store
    store.min_rebuild_interval = 0
    sent: list[tuple[str, str, dict[str, Any]]] = []
    controller = BoundPodController(store, config, (lambda *call: sent.append(call)) if patching else None,
                                    registry=CollectorRegistry())
    rng = random.Random(37)
    for n in range(40):
        store.upsert(random_pod(rng, 1000 + n))
    patched = 0
    for n in range(tries(80, 300)):
        model = store.snapshot(force=True)
        _check(controller, model, config, n)
        patched += len(controller._followed.wanting)
        step(rng, store, model, n)
        if rng.random() < 0.2:  # several changes between two passes
            step(rng, store, store.snapshot(force=True), n)
    assert patched > 0
    assert bool(sent) == patching
    # A node's sharing changes under its bound pods: their patches and series follow.
    for replicas in ("2", "4"):
        model = store.snapshot(force=True)
        node = model.node_objects["dgx-h100-01"]
        labels = {"nvidia.com/gpu.sharing-strategy": "time-slicing", "nvidia.com/gpu.replicas": replicas}
        store.upsert(changed(node, lambda o, labels=labels: o["metadata"].setdefault("labels", {}).update(labels)))
        _check(controller, store.snapshot(force=True), config, replicas)
    # A node that goes and comes back: the pods bound to its name follow it.
    model = store.snapshot(force=True)
    node = model.node_objects["dgx-h100-02"]
    store.delete(node)
    _check(controller, store.snapshot(force=True), config, "node gone")
    store.upsert(changed(node, lambda o: None))
    _check(controller, store.snapshot(force=True), config, "node back")
    # Nothing changed but one pod: it is read again, and not every other pod (those naming ResourceClaims, and
    # those on nodes whose facts each snapshot rebuilds, a topology document's age counting, are read again too).
    model = store.snapshot(force=True)
    controller.reconcile_once()
    pod = next(p for p in model.pods.values() if p["spec"].get("nodeName"))
    store.upsert({**pod, "metadata": {**pod["metadata"], "resourceVersion": "changed"}})
    controller.reconcile_once()
    assert 1 <= controller._rates.computed < len(model.pods) // 4
    assert 1 <= controller._followed.computed < len(model.pods) // 4


def test_a_leader_again_exports_what_it_stood_down_from(tmp_path: Path) -> None:
    """Standing by empties the series; the next pass as leader exports every series again, none changed."""
    config = load_config(EXAMPLE_CONFIG)
    store = build_runtime(config, copy_example_cluster(tmp_path / "cluster")).store
    leading = [True]
    controller = BoundPodController(store, config, None, registry=CollectorRegistry(), is_leader=lambda: leading[0])
    controller.reconcile_once()
    model = store.snapshot()
    exported = cost_series(model.pods.values(), model, config)
    assert exported and controller.collector._series == exported
    leading[0] = False
    controller.reconcile_once()
    assert controller.collector._series == {}
    leading[0] = True
    controller.reconcile_once()
    assert controller.collector._series == exported


def test_a_profiles_status_reads_no_pod_again_and_its_spec_every_pod(tmp_path: Path) -> None:
    """The status KGWE writes to each HardwareProfile (whenever free GPUs move) is read by no charge, price or
    patch: it moves no pod's memo; a change of a profile's spec reads every pod again."""
    config = load_config(EXAMPLE_CONFIG)
    store = build_runtime(config, copy_example_cluster(tmp_path / "cluster")).store
    store.min_rebuild_interval = 0
    controller = BoundPodController(store, config, None, registry=CollectorRegistry())
    rng = random.Random(36)
    for n in range(20):
        store.upsert(random_pod(rng, 2000 + n))
    controller.reconcile_once()
    model = store.snapshot(force=True)
    profile = next(iter(model.hardware_profiles.values()))
    store.upsert(changed(profile, lambda o: o.__setitem__("status", {"available": [{"gpus": 3}]})))
    _check(controller, store.snapshot(force=True), config, "status")
    assert controller._followed.computed == 0 and controller._rates.computed < len(model.pods) // 4
    store.upsert(changed(profile, lambda o: o["spec"].__setitem__("sharing", {"mode": "mps", "gpuFraction": 0.5})))
    _check(controller, store.snapshot(force=True), config, "spec")
    assert controller._followed.computed == len(model.pods)
