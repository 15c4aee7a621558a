"""Where one serve worker's resident memory goes at scale (issue 36), in one process, no server.

Over bench/scale_fleet.py's fleet, the script builds step by step what `kgwe serve` builds: the pods as the
API source keeps them (each object decoded from its own JSON and slimmed), the store and its snapshot, the
runtime (policies compiled), then what the worker builds after ready: the inventory's warm build with every
view the API router registers, the 30-day costs window as JSON, the quota controller's first pass, admission's
quota picture, an audit tick, the bound-pod controller's pass and the HardwareProfile statuses; then one pod
changed and everything built again (what the old snapshot and the memos keep across a change), and glibc's
`malloc_trim(0)` last (what free pages the heap held). After each
step: VmRSS (/proc/self/status), and with --trace tracemalloc's top allocation sites grown by the step (the
tracing itself costs memory: RSS figures are taken without it).

Run: `.venv/bin/python bench/bench_memory.py --nodes 3000 [--trace]` (prints JSON).
"""

from __future__ import annotations

import argparse
import copy
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

import orjson  # noqa: E402
from scale_fleet import generate_fleet  # noqa: E402

from webhook import assembly  # noqa: E402
from webhook.cluster.slimming import slim_object, slim_pod  # noqa: E402
from webhook.config import load_config  # noqa: E402


def rss_mib() -> float:
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return round(int(line.split()[1]) / 1024, 1)
    return 0.0


def _api_objects(nodes: int) -> list[dict[str, Any]]:
    """The fleet as the API source keeps it: every object decoded from its own JSON, then slimmed."""
    fleet = generate_fleet(nodes)
    kept: list[dict[str, Any]] = []
    for kind, objects in (("Node", fleet.nodes), ("Namespace", fleet.namespaces), ("TenantQuota", fleet.quotas),
                          ("Pod", fleet.pods)):
        for obj in objects:
            decoded = orjson.loads(orjson.dumps(obj))
            decoded.setdefault("kind", kind)
            kept.append(slim_pod(decoded) if kind == "Pod" else slim_object(decoded))
    return kept


def _site(frame: tracemalloc.Frame) -> str:
    path = Path(frame.filename)
    return f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path.name}:{frame.lineno}"


class Steps:
    def __init__(self, trace: bool, top: int) -> None:
        self.trace = trace
        self.top = top
        self.rows: list[dict[str, Any]] = []
        self._last = tracemalloc.take_snapshot() if trace else None
        self._rss = rss_mib()

    def step(self, name: str, call: Callable[[], Any]) -> Any:
        if self.trace:
            traced_before = tracemalloc.get_traced_memory()[0]
            tracemalloc.reset_peak()
        started = time.process_time()
        result = call()
        cpu = round(time.process_time() - started, 2)
        if self.trace:
            # What the step held at its highest above what it started with, kept or not: a step's transient
            # copies raise the worker's peak (VmHWM) though they are gone at its end.
            step_peak = tracemalloc.get_traced_memory()[1] - traced_before
        gc.collect()
        rss = rss_mib()
        row: dict[str, Any] = {"step": name, "rss_mib": rss, "grew_mib": round(rss - self._rss, 1), "cpu_s": cpu}
        self._rss = rss
        if self.trace:
            row["traced_peak_above_start_mib"] = round(step_peak / 2**20, 1)
            now = tracemalloc.take_snapshot()
            assert self._last is not None
            stats = now.compare_to(self._last, "lineno")[: self.top]
            row["traced_mib"] = round(tracemalloc.get_traced_memory()[0] / 2**20, 1)
            row["top"] = [f"{s.size_diff / 2**20:+.1f} MiB {s.count_diff:+d} {_site(s.traceback[0])}"
                          for s in stats if abs(s.size_diff) > 2**19]
            self._last = now
        print(json.dumps(row), file=sys.stderr, flush=True)
        self.rows.append(row)
        return result


def measure(nodes: int, trace: bool, top: int) -> dict[str, Any]:
    if trace:
        tracemalloc.start(1)
    config = load_config(str(ROOT / "examples" / "config.yaml"))
    steps = Steps(trace, top)
    gc.disable()  # as the watch source pauses it while a list is read
    objects: list[dict[str, Any]] = steps.step("fleet decoded and slimmed", lambda: _api_objects(nodes))
    store = assembly.new_store(config)
    steps.step("store filled", lambda: store.replace_all(objects))
    objects.clear()
    store.mark_loaded()
    steps.step("snapshot", lambda: store.snapshot(force=True))
    runtime = steps.step("runtime (policies compiled)", lambda: assembly.build_runtime(config, None, store=store))
    gc.enable()
    gc.collect()
    gc.freeze()
    steps.rows.append({"step": "ready (settle_heap)", "rss_mib": rss_mib()})

    from prometheus_client import CollectorRegistry

    from webhook.audit.auditor import Auditor
    from webhook.audit.writers import MemoryReportWriter
    from webhook.controllers.bound_pods import BoundPodController
    from webhook.inventory.cache import InventoryCache
    from webhook.quotas.controller import QuotaController
    from webhook.quotas.snapshot_picture import picture_of
    from webhook.quotas.view import remembered_waiting_rows
    from webhook.server.api_routes import _VIEWS
    from webhook.server.status_sync import profile_statuses
    from webhook.spend.warm import answer_of

    cache = InventoryCache(store.snapshot, lambda: config, fresh_model_source=lambda: store.snapshot(force=True),
                           waiting=remembered_waiting_rows())
    for name, view, render in _VIEWS:
        cache.register(name, view, render)
    quotas = QuotaController(store, config, None)
    auditor = Auditor(runtime, MemoryReportWriter())
    bound = BoundPodController(store, config, None, registry=CollectorRegistry())
    kept: dict[str, Any] = {}

    def rounds(suffix: str) -> None:
        steps.step(f"inventory warm build{suffix}", lambda: cache._rebuild_wanted())
        steps.step(f"costs 30d window JSON{suffix}",
                   lambda: kept.__setitem__("30d", answer_of(runtime.budgets.service, "30d", remember=False)))
        steps.step(f"quota controller pass{suffix}", quotas.reconcile_once)
        steps.step(f"admission quota picture{suffix}", lambda: picture_of(store.snapshot()))
        steps.step(f"audit tick{suffix}", auditor.tick)
        steps.step(f"bound-pod controller pass{suffix}", bound.reconcile_once)
        steps.step(f"profile statuses{suffix}", lambda: profile_statuses(cache.inventory()))

    rounds("")
    pods = store.objects("Pod")
    for i in range(3):
        changed = copy.deepcopy(pods[100 + i])
        changed["metadata"]["resourceVersion"] = f"bench-memory-{i}"
        store.upsert(changed)
    steps.step("snapshot after 3 pod changes", lambda: store.snapshot(force=True))
    cache._built = 0.0  # past the build interval
    rounds(" again")
    from webhook.server.heap import release_free_memory

    steps.step("malloc_trim(0)", release_free_memory)
    return {"nodes": nodes, "pods": len(store.objects("Pod")), "steps": steps.rows, "end_rss_mib": rss_mib()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--trace", action="store_true")
    parser.add_argument("--top", type=int, default=12)
    args = parser.parse_args()
    print(json.dumps(measure(args.nodes, args.trace, args.top), indent=1))


if __name__ == "__main__":
    main()
