"""The costs computation alone, in one process: `SpendService.window_costs("30d")` over the generated fleet of
bench/scale_fleet.py (directory mode: every pod's lifetime), as `/api/v1/costs?window=30d` computes it.

Per size: the first window (every pod's rate computed), the same window again after the service's answer
cache lapsed (the pods unchanged: what a refresh costs), again after one pod changed, and the serialised
answer's size. CPU time of this thread, so a busy machine's waits are not counted. The loaded cluster leaves
the cyclic collector's view, as in the server.

Run: `.venv/bin/python bench/bench_costs.py [--nodes 1000] [--window 30d] [--profile]` (prints JSON).
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

_ROOT = Path(__file__).resolve().parents[1]
for _path in (_ROOT, _ROOT / "bench"):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

import orjson  # noqa: E402
from scale_fleet import generate_fleet  # noqa: E402

import webhook.assembly  # noqa: E402,F401  (it registers the wings in the core's seams)
from webhook.cluster.collector_pause import freeze_what_was_loaded  # noqa: E402
from webhook.cluster.model import ClusterStore  # noqa: E402
from webhook.config import load_config  # noqa: E402
from webhook.spend.service import SpendService  # noqa: E402

CONFIG = _ROOT / "examples" / "config.yaml"


def _cpu(call: Callable[[], Any]) -> tuple[float, Any]:
    started = time.thread_time()
    result = call()
    return round((time.thread_time() - started) * 1000, 1), result


def measure(nodes: int, window: str, profile: bool) -> dict[str, Any]:
    config = load_config(CONFIG)
    store = ClusterStore(config.accelerator_table(), config.topology_staleness_seconds, config.gpu_taint_keys)
    fleet = generate_fleet(nodes)
    store.replace_all([*fleet.nodes, *fleet.namespaces, *fleet.quotas, *fleet.pods])
    store.mark_loaded()
    clock = [time.time()]
    service = SpendService(lambda: config, store.snapshot, clock=lambda: clock[0])
    store.snapshot()
    freeze_what_was_loaded()  # as the server does once the cluster is loaded
    out: dict[str, Any] = {"nodes": nodes, "pods": len(fleet.pods), "window": window}
    out["first_ms"], doc = _cpu(lambda: service.window_costs(window))
    clock[0] += config.costs.cache_seconds + 1
    profiler = cProfile.Profile() if profile else None
    if profiler is not None:
        profiler.enable()
    out["again_ms"], _ = _cpu(lambda: service.window_costs(window))
    if profiler is not None:
        profiler.disable()
    changed = dict(fleet.pods[0])
    changed["metadata"] = {**changed["metadata"], "resourceVersion": "2", "labels": {"app": "changed"}}
    store.upsert(changed)
    store.snapshot(force=True)
    clock[0] += config.costs.cache_seconds + 1
    out["after_one_change_ms"], _ = _cpu(lambda: service.window_costs(window))
    memo = getattr(service, "rates", None)  # the rate memo (absent before it)
    out["rates_computed_after_change"] = getattr(memo, "computed", None)
    out["serialise_ms"], body = _cpu(lambda: orjson.dumps(doc.model_dump(mode="json")))
    out["bytes"] = len(body)
    out["total_cost"] = doc.totals.cost
    if profiler is not None:
        pstats.Stats(profiler, stream=sys.stderr).sort_stats("cumulative").print_stats(25)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--window", default="30d")
    parser.add_argument("--profile", action="store_true", help="cProfile of the second window, on stderr")
    args = parser.parse_args()
    print(json.dumps(measure(args.nodes, args.window, args.profile), indent=2))


if __name__ == "__main__":
    main()
