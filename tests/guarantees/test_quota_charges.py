"""Quota charges a pod's creator cannot talk down: what the intent annotations say is a minimum the pod asks,
never a discount on what it holds (second red-team pass)."""

from __future__ import annotations

from pathlib import Path

import yaml
from cluster_dirs import copy_example_cluster
from guarantees_support import gpu_pod

H100 = "nvidia-h100-80gb"


def memory_capped_cluster(target: Path) -> Path:
    """The example cluster with team-a's H100s capped by GPU memory alone: 480Gi, of which its four running
    H100 pods hold 320Gi: two whole H100s are left."""
    copy_example_cluster(target)
    quotas = [q for q in yaml.safe_load_all((target / "tenant-quotas.yaml").read_text()) if q]
    for quota in quotas:
        if quota["metadata"]["name"] == "team-a":
            quota["spec"]["limits"] = [{"acceleratorType": H100, "gpuMemory": "480Gi"}]
    (target / "tenant-quotas.yaml").write_text(yaml.safe_dump_all(quotas, sort_keys=False))
    return target


def test_a_tiny_gpu_memory_ask_does_not_shrink_the_charge_of_whole_gpus(serve_cluster, tmp_path: Path) -> None:
    # `kgwe.io/gpu-memory: 1Mi` on eight exclusive H100s: the pod holds 640Gi. It was charged 8Mi against the
    # 480Gi limit (320Gi in use) and admitted.
    notes = {"kgwe.io/accelerator": H100, "kgwe.io/sharing": "exclusive", "kgwe.io/gpu-memory": "1Mi"}
    for webhook in serve_cluster(memory_capped_cluster(tmp_path / "cluster")):
        answer, mutated = webhook.admit(gpu_pod("big", gpus=8, annotations=notes))
        assert mutated["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "8"  # whole GPUs
        assert answer["allowed"] is False
        assert "tenant team-a: nvidia-h100-80gb limit 480Gi GPU memory, this pod asks 640Gi" in (
            answer["status"]["message"])
        # Two whole H100s are what is left, whatever memory they ask for: three wait for quota.
        answer, _ = webhook.admit(gpu_pod("pair", gpus=2, annotations=notes))
        assert answer["allowed"] is True, answer
        assert not answer.get("warnings"), answer
        answer, _ = webhook.admit(gpu_pod("three", gpus=3, annotations=notes))
        assert answer["allowed"] is True
        assert any("320Gi of 480Gi GPU memory in use; this pod asks 240Gi" in w for w in answer["warnings"])


def test_a_tiny_gpu_memory_ask_without_a_sharing_mode_counts_whole_gpus(serve_cluster, tmp_path: Path) -> None:
    # The same ask without `kgwe.io/sharing`: a plan shares only when the pod asks to, so its GPUs count whole.
    notes = {"kgwe.io/accelerator": H100, "kgwe.io/gpu-memory": "1Mi"}
    for webhook in serve_cluster(memory_capped_cluster(tmp_path / "cluster")):
        answer, _ = webhook.admit(gpu_pod("big", gpus=8, annotations=notes))
        assert answer["allowed"] is False
        assert "this pod asks 640Gi" in answer["status"]["message"]
