"""The first read of the JSON API after a pause serves the cluster as it is now, not a minutes-old snapshot."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from cluster_dirs import EXAMPLE_CONFIG, copy_example_cluster, gpu_pod

from webhook.assembly import build_runtime
from webhook.config import load_config
from webhook.inventory.cache import InventoryCache
from webhook.inventory.profiles import hardware_profiles_view


def test_first_request_after_idle_builds_from_a_fresh_snapshot(tmp_path: Path) -> None:
    runtime = build_runtime(load_config(EXAMPLE_CONFIG), copy_example_cluster(tmp_path / "cluster"))
    # The admission path's snapshot is rebuilt lazily and rate-limited; make that limit long so only the
    # idle rule can explain a fresh answer.
    runtime.store.min_rebuild_interval = 3600
    cache = InventoryCache(
        runtime.store.snapshot, lambda: runtime.config, max_age_seconds=0.2, background=True,
        fresh_model_source=lambda: runtime.store.snapshot(force=True),
    )

    def premium() -> Any:
        profiles = cache.view("profiles", hardware_profiles_view)["profiles"]
        return next(p for p in profiles if p["name"] == "premium-h100")["available"]

    assert premium() == 8  # the example's 16 H100s, 4 busy on each DGX
    runtime.store.upsert(gpu_pod("late", "team-a", gpus=3, node="dgx-h100-02"))
    time.sleep(0.3)  # the server sits idle longer than max_age_seconds
    assert premium() == 5  # this very request, not a later one
