"""HardwareProfile.status.available follows the cluster, written only when it changed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from webhook.assembly import build_runtime
from webhook.config import load_config
from webhook.inventory.cache import InventoryCache
from webhook.inventory.capacity import Inventory
from webhook.server.status_sync import ProfileStatusSync, profile_statuses

ROOT = Path(__file__).resolve().parents[2]


def test_available_gpus_per_profile_are_written_once_per_change() -> None:
    runtime = build_runtime(load_config(ROOT / "examples" / "config.yaml"), ROOT / "examples" / "cluster")
    runtime.store.min_rebuild_interval = 0
    written: dict[str, dict[str, Any]] = {}
    sync = ProfileStatusSync(runtime, written.__setitem__, is_leader=lambda: True)

    assert set(sync.sync_once()) == set(runtime.store.snapshot().hardware_profiles)
    # dgx-h100-01 and dgx-h100-02 run a 4-GPU pod each (train-llm-0, inference/vllm-70b-0); the finished 8-GPU
    # pod on dgx-h100-02 does not count, nor does ml-research/waiting, which no node has room for.
    assert written["premium-h100"]["available"] == [{"acceleratorType": "nvidia-h100-80gb", "gpus": 8, "total": 16}]
    assert written["small-mig"]["available"][0]["acceleratorType"] == "nvidia-a100-80gb"

    # The API server now holds these statuses: the next sync writes nothing.
    for name, status in written.items():
        profile = runtime.store.snapshot().hardware_profiles[name]
        runtime.store.upsert({**profile, "status": {"available": status["available"]}})
    written.clear()
    assert sync.sync_once() == []
    assert written == {}


def test_a_server_sync_reads_the_inventory_its_read_api_keeps() -> None:
    """In a server the statuses come from the read API's inventory (built from what changed), never from one the
    sync builds of every pod: before that inventory's first build it writes nothing, and its statuses are the
    same as those of an inventory of its own."""
    runtime = build_runtime(load_config(ROOT / "examples" / "config.yaml"), ROOT / "examples" / "cluster")
    runtime.store.min_rebuild_interval = 0
    cache = InventoryCache(runtime.store.snapshot, lambda: runtime.config, background=False, refresh_seconds=0,
                           build_share=0)
    alone: dict[str, dict[str, Any]] = {}
    shared: dict[str, dict[str, Any]] = {}
    own = ProfileStatusSync(runtime, alone.__setitem__, is_leader=lambda: True)
    sync = ProfileStatusSync(runtime, shared.__setitem__, is_leader=lambda: True, cache=cache)

    assert sync.sync_once() == [] and cache.builds == 0  # it waits for the read API's first build
    cache.inventory()
    assert set(sync.sync_once()) == set(own.sync_once()) == set(runtime.store.snapshot().hardware_profiles)
    assert shared == alone and cache.builds == 1
    for name, status in shared.items():  # the API server now holds them
        profile = runtime.store.snapshot().hardware_profiles[name]
        runtime.store.upsert({**profile, "status": {"available": status["available"]}})
    cache.inventory()
    assert sync.sync_once() == []

    # train-llm-0 ends: its 4 H100s are free once the read API's inventory holds the change.
    pod = next(p for p in runtime.store.objects("Pod") if p["metadata"]["name"] == "train-llm-0")
    runtime.store.delete(pod)
    assert sync.sync_once() == []  # the kept inventory is behind the snapshot: nothing is built here
    cache.inventory()
    assert set(sync.sync_once()) == {"premium-h100", "workbench-h100"}  # the two profiles that offer H100s
    assert shared["premium-h100"]["available"] == [{"acceleratorType": "nvidia-h100-80gb", "gpus": 12, "total": 16}]
    assert profile_statuses(cache.inventory()) == profile_statuses(Inventory(runtime.store.snapshot(), runtime.config))
