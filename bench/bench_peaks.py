"""The transient memory of two builds a serve worker makes after ready, in one process (issue 36, thirteenth round):
what each holds at its highest above what it started with (tracemalloc's peak), kept or not.

- the 30-day costs window's answer (webhook/spend/warm.py `answer_of`: the document built, written as JSON), over
  bench/scale_fleet.py's fleet as the store keeps it, computed twice (the second finds the pods' rates kept, as the
  worker's later windows do);
- a `/metrics` scrape of the bound-pod controller's per-pod cost series over the same fleet: the families as
  prometheus_client's `GaugeMetricFamily` held them (rendered by `generate_latest`), as the collector yields them
  now (`generate_latest`), and in parts (webhook/server/metrics_parts.py, what `/metrics` sends).

Run: `.venv/bin/python bench/bench_peaks.py --nodes 2000` (prints JSON; tracemalloc slows the CPU figures).
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "bench"), str(ROOT)]

from bench_memory import _api_objects  # noqa: E402
from held_families import HeldFamilies  # noqa: E402
from prometheus_client import CollectorRegistry, generate_latest  # noqa: E402

from webhook import assembly  # noqa: E402
from webhook.config import load_config  # noqa: E402


def peak_of(call: Callable[[], Any]) -> dict[str, Any]:
    gc.collect()
    before = tracemalloc.get_traced_memory()[0]
    tracemalloc.reset_peak()
    started = time.process_time()
    result = call()
    cpu = time.process_time() - started
    peak, now = tracemalloc.get_traced_memory()[1], tracemalloc.get_traced_memory()[0]
    size = len(result) if isinstance(result, bytes) else sum(len(p) for p in result) if isinstance(result, list) \
        else len(getattr(result, "body", b""))
    del result
    return {"peak_above_start_mib": round((peak - before) / 2**20, 1),
            "held_after_mib": round((now - before) / 2**20, 1), "bytes": size, "cpu_s_traced": round(cpu, 2)}


def measure(nodes: int) -> dict[str, Any]:
    config = load_config(str(ROOT / "examples" / "config.yaml"))
    gc.disable()
    objects = _api_objects(nodes)
    store = assembly.new_store(config)
    store.replace_all(objects)
    objects.clear()
    store.mark_loaded()
    store.snapshot(force=True)
    runtime = assembly.build_runtime(config, None, store=store)
    gc.enable()
    gc.collect()
    gc.freeze()
    from webhook.controllers.bound_pods import BoundPodController
    from webhook.spend.warm import answer_of

    out: dict[str, Any] = {"nodes": nodes, "pods": len(store.objects("Pod"))}
    tracemalloc.start(1)
    service = runtime.budgets.service
    out["costs_30d_first"] = peak_of(lambda: answer_of(service, "30d", remember=False))
    out["costs_30d_again"] = peak_of(lambda: answer_of(service, "30d", remember=False))
    registry = CollectorRegistry(auto_describe=False)
    bound = BoundPodController(store, config, None, registry=registry)
    bound.reconcile_once()
    out["series"] = len(bound.collector._series)
    held = CollectorRegistry(auto_describe=False)
    held.register(HeldFamilies(bound.collector))
    out["metrics_held_families"] = peak_of(lambda: generate_latest(held))
    out["metrics_generate_latest"] = peak_of(lambda: generate_latest(registry))
    try:
        from webhook.server.metrics_parts import latest_parts
    except ImportError:  # a tree before metrics_parts.py
        return out
    out["metrics_parts"] = peak_of(lambda: latest_parts(registry))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=2000)
    args = parser.parse_args()
    print(json.dumps(measure(args.nodes), indent=1))


if __name__ == "__main__":
    main()
