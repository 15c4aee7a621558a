"""Issue 35, item 7: "what blocks it now" says what KGWE would refuse first (never "nothing blocks it" beside a
refusal), and merges the scheduler's own reason (PodScheduled) and DRA claims not allocated yet; the slimmed
pod of a real cluster keeps what those read."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from cluster_dirs import EXAMPLE_CONFIG, copy_example_cluster, gpu_pod, plant

from webhook.assembly import build_runtime
from webhook.cluster.slimming import slim_pod
from webhook.config import load_config
from webhook.explain import explain, render_text

SCHEDULER_SAYS = "0/12 nodes are available: 4 Insufficient memory, 8 node(s) didn't match Pod's node affinity."


@pytest.fixture(autouse=True)
def _state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KGWE_STATE_DIR", str(tmp_path / "state"))


def _blocking(tmp_path: Path, pod: dict[str, Any], *extra: dict[str, Any]) -> list[str]:
    cluster = copy_example_cluster(tmp_path / "cluster")
    plant(cluster, "zz-pod.yaml", pod, *extra)
    runtime = build_runtime(load_config(EXAMPLE_CONFIG), cluster)
    found = runtime.store.snapshot().pods[f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"]
    explanation = explain(runtime.admission, found, existing=True)
    assert "what blocks it now:" in render_text(explanation)
    return explanation.blocking


def test_a_pod_kgwe_would_refuse_says_so_first_and_never_that_nothing_blocks_it(tmp_path: Path) -> None:
    pod = gpu_pod("typo", "ml-research", phase="Pending", annotations={"kgwe.io/accelerator": "nvidia-h900"})
    blocking = _blocking(tmp_path, pod)
    assert blocking[0].startswith("KGWE would refuse it as it is now") and "nvidia-h900" in blocking[0]
    assert not any(b.startswith("nothing") for b in blocking), blocking


def test_the_schedulers_own_reason_is_merged(tmp_path: Path) -> None:
    pod = gpu_pod("no-memory", "ml-research", phase="Pending", annotations={"kgwe.io/accelerator": "nvidia-l4-24gb"})
    pod["status"]["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                    "message": SCHEDULER_SAYS, "lastTransitionTime": "2026-01-01T00:00:00Z"}]
    blocking = _blocking(tmp_path, pod)
    assert f"the scheduler says (Unschedulable): {SCHEDULER_SAYS}" in blocking
    # The model finds room, but the scheduler has spoken: no "nothing blocks it" next to its word.
    assert not any(b.startswith("nothing") for b in blocking), blocking


def test_dra_claims_not_allocated_yet_are_named(tmp_path: Path) -> None:
    pod = gpu_pod("claims", "ml-research", phase="Pending", annotations={"kgwe.io/accelerator": "nvidia-l4-24gb"})
    pod["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": "my-gpu"},
                                     {"name": "made", "resourceClaimTemplateName": "one-gpu"}]
    claim = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
             "metadata": {"name": "my-gpu", "namespace": "ml-research"},
             "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]}}}
    blocking = _blocking(tmp_path, pod, claim)
    assert any(b.startswith("DRA claim 'gpu': ResourceClaim ml-research/my-gpu is not allocated yet") for b in blocking)
    assert "DRA claim 'made': its ResourceClaim from ResourceClaimTemplate one-gpu is not created yet" in blocking


def test_the_slimmed_pod_keeps_what_blocks_it_and_bounds_it() -> None:
    pod = gpu_pod("p", "ns", phase="Pending")
    pod["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "t"}]
    pod["status"]["resourceClaimStatuses"] = [{"name": "gpu", "resourceClaimName": "p-gpu-x"}]
    pod["status"]["conditions"] = [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "m" * 5000,
         "lastProbeTime": None},
        {"type": "Initialized", "status": "True"},
    ]
    slim = slim_pod(pod)
    assert slim["spec"]["resourceClaims"] == pod["spec"]["resourceClaims"]
    assert slim["status"]["resourceClaimStatuses"] == pod["status"]["resourceClaimStatuses"]
    (condition,) = slim["status"]["conditions"]
    assert set(condition) == {"type", "status", "reason", "message"} and len(condition["message"]) == 1024


GATED = {"type": "PodScheduled", "status": "False", "reason": "SchedulingGated",
         "message": "Scheduling is blocked due to non-empty scheduling gates"}


def test_a_gated_pod_says_why_each_gate_holds_it_not_that_it_is_gated(tmp_path: Path) -> None:
    # A gang of 2 on GB200 with one member so far: the gang gate says what the gang waits for; the API server's
    # SchedulingGated condition (every gated pod has it) is not repeated as "the scheduler says".
    pod = gpu_pod("gang-0", "inference", gpus=4, phase="Pending",
                  annotations={"kgwe.io/accelerator": "nvidia-gb200-186gb", "kgwe.io/gang": "g",
                               "kgwe.io/gang-size": "2"})
    pod["metadata"]["labels"] = {"kgwe.io/gang": "g"}
    pod["spec"]["schedulingGates"] = [{"name": "kgwe.io/gang"}, {"name": "example.com/other"}]
    pod["status"]["conditions"] = [GATED]
    blocking = _blocking(tmp_path, pod)
    assert blocking[:2] == [
        "waits with its gang (gate kgwe.io/gang): gang g, 1 of 2 pods: 1 of 2 members exist",
        "held by scheduling gate example.com/other: the scheduler does not consider it until whoever set it "
        "removes it",
    ]
    assert not any(b.startswith("the scheduler says") for b in blocking), blocking
    # Once the gates are off, a SchedulingGated left over is the scheduler's word again, said as it is.
    pod["spec"].pop("schedulingGates")
    assert "the scheduler says (SchedulingGated): Scheduling is blocked due to non-empty scheduling gates" in (
        _blocking(tmp_path / "ungated", pod))
