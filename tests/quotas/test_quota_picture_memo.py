"""The quota controller's remembered pod reads (webhook/quotas/waiters.py `PodRead`) against a fresh quota picture
over a cluster that changes under them (tests/fixtures/changing_cluster.py), each step through the real store."""

from __future__ import annotations

import random
from pathlib import Path

from changing_cluster import random_pod, step
from cluster_dirs import EXAMPLE_CONFIG, copy_example_cluster

from webhook.assembly import build_runtime
from webhook.config import load_config
from webhook.quotas.waiters import ChargeCache, quota_picture


def test_a_remembered_picture_equals_a_fresh_one_over_a_changing_cluster(tmp_path: Path) -> None:
    runtime = build_runtime(load_config(EXAMPLE_CONFIG), copy_example_cluster(tmp_path / "cluster"))
    store = runtime.store
    store.min_rebuild_interval = 0
    rng = random.Random(36)
    for n in range(40):
        store.upsert(random_pod(rng, 1000 + n))
    cache = ChargeCache()
    reused = 0
    for n in range(300):
        model = store.snapshot(force=True)
        before = dict(cache)
        in_flight = {str(p["metadata"].get("uid") or ""): None for p in list(model.pods.values())[:2]}
        assert quota_picture(model, in_flight, cache) == quota_picture(model, in_flight), f"step {n}"
        reused += sum(1 for key, read in cache.items() if before.get(key) is read)
        step(rng, store, model, n)
    assert reused > 0
    assert any(picture.waiters or picture.released for picture in quota_picture(store.snapshot()).tenants.values())
