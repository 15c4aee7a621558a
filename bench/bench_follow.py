"""The background passes after a few pod changes, in one process over the scale fleet (issue 36): what each pass
costs once its first pass is done and admissions add pods, as the worker runs them beside the event loop.

    python bench/bench_follow.py [--nodes 3000] [--rounds 5] [--changes 3]      # prints JSON

Per round: `--changes` pods are stored anew (a pod created as admission lets one through, and running pods whose
status moved), a snapshot is taken, then each pass runs once and its CPU time (this thread's) is recorded: the
inventory's warm build with every view the read API keeps, the bound-pod controller's pass, the gangs' members
(`gang_pods`, kept and moved by the changes; beside it the walk of every pod it replaced). The first pass of
each (every pod computed) is recorded apart; medians of the rounds after it.
"""

from __future__ import annotations

import argparse
import copy
import gc
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
for _path in (ROOT, ROOT / "bench"):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

from bench_memory import _api_objects  # noqa: E402
from scale_fleet import pod  # noqa: E402

from webhook import assembly  # noqa: E402
from webhook.config import load_config  # noqa: E402


def _cpu(call: Callable[[], Any]) -> float:
    started = time.thread_time()
    call()
    return time.thread_time() - started


def measure(nodes: int, rounds: int, changes: int) -> dict[str, Any]:
    from prometheus_client import CollectorRegistry

    from webhook.controllers.bound_pods import BoundPodController
    from webhook.gangs.members import KeptGangPods
    from webhook.inventory.cache import InventoryCache
    from webhook.quotas.view import remembered_waiting_rows
    from webhook.server.api_routes import _VIEWS

    config = load_config(str(ROOT / "examples" / "config.yaml"))
    gc.disable()
    store = assembly.new_store(config)
    store.replace_all(_api_objects(nodes))
    store.mark_loaded()
    gc.enable()
    gc.collect()
    gc.freeze()
    cache = InventoryCache(store.snapshot, lambda: config, fresh_model_source=lambda: store.snapshot(force=True),
                           waiting=remembered_waiting_rows())
    for name, view, render in _VIEWS:
        cache.register(name, view, render)
    bound = BoundPodController(store, config, None, registry=CollectorRegistry())

    def inventory() -> None:
        cache._built = 0.0  # past the build interval
        cache._rebuild_wanted()

    kept_gangs = KeptGangPods()
    passes: dict[str, Callable[[], Any]] = {"inventory build and views": inventory,
                                            "bound-pod controller pass": bound.reconcile_once,
                                            "gang members, kept": lambda: kept_gangs.members(store.snapshot()),
                                            "gang members, every pod walked":
                                                lambda: KeptGangPods().members(store.snapshot())}
    first = {name: round(_cpu(call), 3) for name, call in passes.items()}
    running = [p for p in store.objects("Pod") if (p.get("spec") or {}).get("nodeName")]
    after: dict[str, list[float]] = {name: [] for name in passes}
    for i in range(rounds):
        for j in range(changes):
            if j == 0:  # a new GPU pod, as admission lets one through
                store.upsert(pod(f"follow-{i:04d}", "team-001", None, 1))
            else:  # a running pod's status moved
                changed = copy.deepcopy(running[(i * changes + j) % len(running)])
                changed["metadata"]["resourceVersion"] = f"follow-{i}-{j}"
                store.upsert(changed)
        store.snapshot(force=True)
        for name, call in passes.items():
            after[name].append(_cpu(call))
    return {"nodes": nodes, "pods": len(store.objects("Pod")), "changes_per_round": changes, "rounds": rounds,
            "first_pass_cpu_s": first,
            "pass_cpu_s_median": {name: round(statistics.median(v), 4) for name, v in after.items()},
            "pass_cpu_s_max": {name: round(max(v), 4) for name, v in after.items()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--changes", type=int, default=3)
    args = parser.parse_args()
    print(json.dumps(measure(args.nodes, args.rounds, args.changes), indent=1))


if __name__ == "__main__":
    main()
