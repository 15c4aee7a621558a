"""The quota controller's pass in process, over the scale fleet (bench/scale_fleet.py): its CPU time after one
pod's change, after a gated team-q pod comes to wait behind the full quota, after team-q's running pod is deleted
(that pass releases the waiting pod: what bench_scale.py's pod change does), after one node's change, and the
first pass (every pod read); then admission's picture of a new snapshot (`picture_of`) after one
pod's change, against the full computation of the same snapshot, and a team-q pod's `/validate` after one pod's
change (whether to warn that it will wait asks that picture). The snapshot is rebuilt before each timed
pass, so the figure is the pass's own; the cyclic collector is off while timing, as after start-up's freeze.

Run: `.venv/bin/python bench/bench_quota_pass.py --nodes 3000` (prints JSON). Issue 36: a pass after one
change must not be proportional to all pods.
"""

from __future__ import annotations

import argparse
import copy
import gc
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "bench"), str(ROOT)]

import jsonpatch  # noqa: E402
from scale_fleet import QUOTA_NAMESPACE, generate_fleet, pod  # noqa: E402

from webhook import assembly  # noqa: E402
from webhook.cluster.model import ClusterModel  # noqa: E402
from webhook.config import load_config  # noqa: E402
from webhook.quotas.controller import QuotaController  # noqa: E402
from webhook.quotas.snapshot_picture import picture_of  # noqa: E402
from webhook.quotas.waiters import quota_picture  # noqa: E402
from webhook.review import answer, create_review, decoded_patch  # noqa: E402


def _timed(controller: QuotaController) -> float:
    started = time.process_time()
    controller.reconcile_once()
    return round((time.process_time() - started) * 1000, 2)


def _timed_call(call: Callable[[ClusterModel], object], model: ClusterModel) -> float:
    started = time.process_time()
    call(model)
    return round((time.process_time() - started) * 1000, 2)


def _admission_picture(store: Any, fleet: Any, changes: int) -> dict[str, Any]:
    """Admission's picture (`picture_of`) of a new snapshot after one pod's change, against the full
    computation (`quota_picture`) of the same snapshot, which it equals."""
    first = _timed_call(picture_of, store.snapshot(force=True))
    kept, full = [], []
    for i in range(changes):
        changed = copy.deepcopy(fleet.pods[200 + i])
        changed["metadata"]["resourceVersion"] = f"bench-admission-{i}"
        store.upsert(changed)
        model = store.snapshot(force=True)
        kept.append(_timed_call(picture_of, model))
        full.append(_timed_call(quota_picture, model))
    return {"first": first, "pod_change": kept, "pod_change_median": sorted(kept)[len(kept) // 2],
            "full_computation_median": sorted(full)[len(full) // 2]}


def _gated(admission: Any, name: str) -> dict[str, Any]:
    """A team-q pod asking 8 GPUs as /mutate leaves it (behind the quota gate)."""
    new = pod(name, QUOTA_NAMESPACE, None, 8)
    mutated = answer(admission, create_review(new, "bench", []), True, 30.0)
    gated: dict[str, Any] = jsonpatch.apply_patch(create_review(new, "bench", [])["request"]["object"],
                                                  decoded_patch(mutated))
    return gated


def _quota_validate(admission: Any, fleet: Any, changes: int) -> dict[str, Any]:
    """A team-q pod's `/validate` after one pod's change (a new snapshot): whether to warn that the pod will
    wait asks admission's picture of that snapshot."""
    gated = _gated(admission, "q-bench")
    validate = []
    for i in range(changes):
        changed = copy.deepcopy(fleet.pods[300 + i])
        changed["metadata"]["resourceVersion"] = f"bench-validate-{i}"
        admission.runtime.store.upsert(changed)
        admission.runtime.store.snapshot(force=True)
        started = time.process_time()
        answered = answer(admission, create_review(gated, "bench", []), False, 30.0)
        validate.append(round((time.process_time() - started) * 1000, 2))
        assert answered["allowed"], answered
    return {"pod_change": validate, "pod_change_median": sorted(validate)[len(validate) // 2]}


def bench_quota_pass(nodes: int, changes: int = 8) -> dict[str, Any]:
    config = load_config(str(ROOT / "examples" / "config.yaml"))
    gc.disable()
    fleet = generate_fleet(nodes)
    store = assembly.new_store(config)
    store.replace_all([*fleet.nodes, *fleet.pods, *fleet.namespaces, *fleet.quotas])
    runtime = assembly.build_runtime(config, None, store=store)
    store.snapshot(force=True)
    gc.enable()
    gc.collect()
    gc.freeze()
    gc.disable()
    controller = QuotaController(store, config, None)
    # Its task stopped: the store's events would otherwise wake it to run passes of its own beside the timed ones
    # (taking their marks, or racing them on the kept reads).
    controller.task.signal_stop()
    first = _timed(controller)
    pod_changes = []
    for i in range(changes):
        changed = copy.deepcopy(fleet.pods[100 + i])
        changed["metadata"]["resourceVersion"] = f"bench-{i}"
        store.upsert(changed)
        store.snapshot(force=True)
        pod_changes.append(_timed(controller))
    # team-q's quota is full: a pod gated by /mutate waits behind it, and the delete's pass releases it.
    waiting = _gated(runtime.admission, "q-waiting")
    waiting["metadata"].update(resourceVersion="bench-waiting", uid="bench-waiting")
    store.upsert(waiting)
    store.snapshot(force=True)
    waits = _timed(controller)
    assert not controller.last or not controller.last.released, controller.last
    store.delete(next(p for p in fleet.pods if p["metadata"]["namespace"] == QUOTA_NAMESPACE))
    store.snapshot(force=True)
    deleted = _timed(controller)
    assert controller.last is not None and [k for k, _t in controller.last.released] == [
        f"{QUOTA_NAMESPACE}/q-waiting"], controller.last
    node = copy.deepcopy(fleet.nodes[5])
    node["metadata"]["labels"]["kgwe.io/bench"] = "1"
    node["metadata"]["resourceVersion"] = "bench-node"
    store.upsert(node)
    store.snapshot(force=True)
    node_change = _timed(controller)
    admission = _admission_picture(store, fleet, changes)
    validate = _quota_validate(runtime.admission, fleet, changes)
    return {"nodes": nodes, "pods": len(fleet.pods), "cpu_ms": {
        "first_pass": first, "pod_change": pod_changes, "pod_change_median": sorted(pod_changes)[len(pod_changes) // 2],
        "quota_pod_waits": waits, "quota_pod_deleted": deleted, "node_change": node_change,
        "admission_picture": admission, "quota_validate": validate}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    args = parser.parse_args()
    print(json.dumps(bench_quota_pass(args.nodes), indent=2))


if __name__ == "__main__":
    main()
