"""HardwareProfile.status.available follows the cluster, written only when it changed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from webhook.assembly import build_runtime
from webhook.config import load_config
from webhook.server.status_sync import ProfileStatusSync

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
