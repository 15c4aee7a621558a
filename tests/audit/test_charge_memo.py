"""The audit's remembered charges (webhook/audit/charges.py) against a fresh `usage_charges` over a cluster that
changes under them (tests/fixtures/changing_cluster.py), each step through the real store."""

from __future__ import annotations

import random
from pathlib import Path

from changing_cluster import random_pod, step
from cluster_dirs import EXAMPLE_CONFIG, copy_example_cluster, gpu_pod
from effort import tries

from webhook.assembly import build_runtime
from webhook.audit.charges import ChargeMemo
from webhook.config import load_config
from webhook.quota_charges import usage_charges


def test_remembered_charges_equal_a_fresh_computation_over_a_changing_cluster(tmp_path: Path) -> None:
    runtime = build_runtime(load_config(EXAMPLE_CONFIG), copy_example_cluster(tmp_path / "cluster"))
    store = runtime.store
    store.min_rebuild_interval = 0
    memo = ChargeMemo()
    rng = random.Random(36)
    for n in range(40):
        store.upsert(random_pod(rng, 1000 + n))
    looked_up = 0
    for n in range(tries(80, 300)):
        model = store.snapshot(force=True)
        assert memo.usage_charges(model) == usage_charges(model), f"step {n}"
        looked_up += sum(1 for _ in model.pods) - memo.computed
        step(rng, store, model, n)
    before = store.snapshot(force=True)
    memo.usage_charges(before)
    cpu_only = gpu_pod("cpu-only", "team-a", node="dgx-h100-01")
    cpu_only["spec"]["containers"][0]["resources"] = {}
    store.upsert(cpu_only)
    after = store.snapshot(force=True)
    assert memo.usage_charges(after) == usage_charges(after)
    # One new pod, and the facts of nodes rebuilt on every snapshot (a topology document's age counts): only
    # those are charged again.
    rebuilt = {name for name, facts in after.nodes.items() if before.nodes.get(name) is not facts}
    assert memo.computed == 1 + sum(1 for p in after.pods.values() if p["spec"].get("nodeName") in rebuilt
                                and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed"))
    assert looked_up > 0
