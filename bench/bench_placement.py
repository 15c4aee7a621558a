"""Placement against clusters of 10, 1,000 and 10,000 generated nodes, and what the cluster model costs per node.

Placement reads per-type indexes of the snapshot, never the node list, so its time must not grow with
the cluster: the ratio of the largest cluster's time to the smallest's is the number to watch (the
goal is under 1.5). Timed per request, as `/mutate` and `/validate` run it without policy engines:
`build_plan` alone, and the whole admission core (intent, tenant, plan, mutation pipeline to a
fixpoint, patch). Memory is tracemalloc's count of what a ClusterStore holding N nodes and its
snapshot keep alive, minus an empty store's, divided by N.

Run: `.venv/bin/python bench/bench_placement.py` (prints JSON).
"""

from __future__ import annotations

import gc
import json
import statistics
import sys
import time
import tracemalloc
from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

_ROOT = Path(__file__).resolve().parents[1]
for _path in (_ROOT, _ROOT / "bench"):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

import orjson  # noqa: E402
from generate_cluster import generate_nodes  # noqa: E402

from webhook.admission.request import decode_review  # noqa: E402
from webhook.assembly import build_runtime  # noqa: E402
from webhook.cluster.model import ClusterModel, ClusterStore  # noqa: E402
from webhook.config import Config, load_config  # noqa: E402
from webhook.intent import parse_intent  # noqa: E402
from webhook.placement.plan import build_plan  # noqa: E402
from webhook.review import create_review  # noqa: E402

SIZES = (10, 1_000, 10_000)
CONFIG = _ROOT / "examples" / "config.yaml"
RATIO_LIMIT = 1.5


def _store(config: Config, objects: Iterable[dict[str, Any]]) -> ClusterStore:
    store = ClusterStore(config.accelerator_table(), config.topology_staleness_seconds, config.gpu_taint_keys)
    for obj in objects:
        store.upsert(obj)
    store.mark_loaded()
    return store


def typical_pod(model: ClusterModel) -> dict[str, Any]:
    """One GPU of the cluster's most common accelerator type, asked for by name (the commonest request)."""
    counts = Counter({type_id: len(model.types[type_id].nodes) for type_id in model.type_ids()})
    if not counts:
        raise ValueError("the generated cluster has no typed GPU nodes")
    type_id = counts.most_common(1)[0][0]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "bench-train", "namespace": "default", "annotations": {"kgwe.io/accelerator": type_id}},
        "spec": {"containers": [{
            "name": "trainer", "image": "nvcr.io/nvidia/pytorch:24.05-py3",
            "resources": {"limits": {"nvidia.com/gpu": "1", "cpu": "8", "memory": "64Gi"}},
        }]},
    }


def _time(fn: Callable[[], Any], runs: int, warmup: int) -> dict[str, float]:
    for _ in range(warmup):
        fn()
    gc.collect()
    samples = []
    for _ in range(runs):
        started = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - started)
    ordered = sorted(samples)
    return {
        "p50_ms": round(statistics.median(ordered) * 1000, 4),
        "p99_ms": round(ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))] * 1000, 4),
        "runs": runs,
    }


def _one_size(config: Config, nodes: int, runs: int) -> dict[str, Any]:
    store = _store(config, generate_nodes(nodes))
    started = time.perf_counter()
    model = store.snapshot(force=True)
    first_snapshot = time.perf_counter() - started
    runtime = build_runtime(config, None, store=store, load_policies=False)
    pod = typical_pod(model)
    intent = parse_intent(pod)
    mutate_body = orjson.dumps(create_review(pod, "bench", ["team-a"]))
    mutated = runtime.admission.mutate(decode_review(mutate_body))
    validate_body = orjson.dumps(create_review(mutated.object or pod, "bench", ["team-a"]))

    def rebuild() -> None:
        # One node changed (a watch event): the next snapshot recomputes that node's facts and the indexes.
        node = dict(store.objects("Node")[0])
        node["metadata"] = {**node["metadata"], "resourceVersion": str(time.perf_counter_ns())}
        store.upsert(node)
        store.snapshot(force=True)

    return {
        "nodes": len(model.nodes),
        "types": model.type_ids(),
        "pod_type": pod["metadata"]["annotations"]["kgwe.io/accelerator"],
        "first_snapshot_ms": round(first_snapshot * 1000, 2),
        "build_plan": _time(lambda: build_plan(pod, intent, None, model, config), runs, runs // 10),
        "mutate_core": _time(lambda: runtime.admission.mutate(decode_review(mutate_body)), runs, runs // 10),
        "validate_core": _time(lambda: runtime.admission.validate(decode_review(validate_body)), runs, runs // 10),
        "snapshot_after_one_node_change": _time(rebuild, max(3, runs // 100), 1),
    }


def bench_placement(sizes: Iterable[int] = SIZES, runs: int = 2000) -> dict[str, Any]:
    """Placement time per request at each cluster size, and the ratio of the largest size to the smallest."""
    config = load_config(CONFIG)
    by_size = {str(n): _one_size(config, n, runs) for n in sizes}
    smallest, largest = by_size[min(by_size, key=int)], by_size[max(by_size, key=int)]
    ratios = {
        key: round(largest[key]["p50_ms"] / smallest[key]["p50_ms"], 3)
        for key in ("build_plan", "mutate_core", "validate_core")
    }
    return {
        "name": "placement_by_cluster_size",
        "setup": "generated nodes (bench/generate_cluster.py), examples/config.yaml, no policy engines; "
                 "a 1-GPU pod naming the commonest type",
        "sizes": by_size,
        "largest_vs_smallest_p50": ratios,
        "ratio_limit": RATIO_LIMIT,
        "within": all(value < RATIO_LIMIT for value in ratios.values()),
    }


def _traced_bytes(config: Config, nodes: int) -> int:
    gc.collect()
    tracemalloc.start()
    try:
        store = _store(config, generate_nodes(nodes) if nodes else ())
        model = store.snapshot(force=True)
        model.summary()
        gc.collect()
        current, _peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    del store, model
    return current


def bench_cluster_memory(sizes: Iterable[int] = SIZES) -> dict[str, Any]:
    """Bytes per node the cluster model keeps (node objects as listed, node facts, type indexes, summary)."""
    config = load_config(CONFIG)
    empty = _traced_bytes(config, 0)
    per_size = {}
    for nodes in sizes:
        held = _traced_bytes(config, nodes) - empty
        per_size[str(nodes)] = {"bytes": held, "bytes_per_node": round(held / nodes)}
    return {
        "name": "cluster_model_memory",
        "setup": "tracemalloc: ClusterStore with N generated nodes + its snapshot + summary, minus an empty store",
        "empty_store_bytes": empty,
        "sizes": per_size,
    }


if __name__ == "__main__":
    print(json.dumps({"placement": bench_placement(), "memory": bench_cluster_memory()}, indent=2))
