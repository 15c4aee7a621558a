"""Quotas at admission (SPEC section 10): `/mutate` gates, `/validate` refuses what would slip past the queue,
and nothing a request does holds or changes any quota. Real admission path over the example cluster, real
AdmissionReview JSON.

The example cluster's team-a may use 8 H100s and 2 A100s; `train-llm-0` runs on 4 H100s; `batch-done`
(8 H100s) has Succeeded.
"""

from __future__ import annotations

import copy
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from quota_fixtures import ROOT

from webhook.assembly import build_runtime
from webhook.config import load_config, parse_config
from webhook.review import answer, create_review, render_text, review_pod
from webhook.runtime import Runtime

H100 = {"kgwe.io/accelerator": "nvidia-h100-80gb"}
GATE = "kgwe.io/quota"


def gpu_pod(namespace: str, name: str, gpus: int, annotations: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "annotations": dict(annotations)},
        "spec": {"containers": [{"name": "main", "image": "cuda", "resources": {"limits": {"nvidia.com/gpu": gpus}}}]},
    }


def gates(pod: dict[str, Any]) -> list[str]:
    return [g["name"] for g in pod["spec"].get("schedulingGates") or []]


@pytest.fixture
def runtime() -> Runtime:
    return build_runtime(load_config(ROOT / "examples" / "config.yaml"), ROOT / "examples" / "cluster")


def validate(runtime: Runtime, pod: dict[str, Any], user: str = "alice") -> dict[str, Any]:
    return answer(runtime.admission, create_review(pod, user, []), False, 5.0)


def test_a_gpu_pod_of_a_tenant_with_a_quota_is_gated_and_says_whether_it_would_start(runtime: Runtime) -> None:
    first = review_pod(runtime.admission, gpu_pod("team-a", "a", 4, H100), "alice")
    assert first.allowed, first.message
    assert GATE in gates(first.object)
    assert first.object["metadata"]["annotations"]["kgwe.io/tenant"] == "team-a"
    assert first.quota == "released (tenant team-a: its quota holds this pod now)"
    # 4 running + 6 asked > 8: admitted (the default overQuota: queue) and it would wait, saying why.
    later = review_pod(runtime.admission, gpu_pod("team-a", "b", 6, H100), "alice")
    assert later.allowed, later.message
    assert later.quota == ("would wait for quota (team-a: nvidia-h100-80gb 4 of 8 GPUs in use; this pod asks 6; "
                           "1st in line)")
    assert "quota: would wait for quota (team-a:" in render_text(later)


def test_reviews_and_admissions_hold_nothing(runtime: Runtime) -> None:
    # Every call is answered from the pods that exist: ten reviews of 4 GPUs each leave the quota as it was.
    for i in range(10):
        assert review_pod(runtime.admission, gpu_pod("team-a", f"p{i}", 4, H100), "alice").quota.startswith(
            "released")


def test_a_pod_without_the_gate_or_with_a_node_name_is_refused(runtime: Runtime) -> None:
    mutated = review_pod(runtime.admission, gpu_pod("team-a", "a", 1, H100), "alice").object
    forged = copy.deepcopy(mutated)
    forged["spec"]["schedulingGates"] = []
    refused = validate(runtime, forged)
    assert not refused["allowed"]
    assert "does not carry it" in refused["status"]["message"]
    assert "kgwe.io/quota" in refused["status"]["message"]
    pinned = copy.deepcopy(mutated)
    pinned["spec"]["nodeName"] = "h100-node-1"
    refused = validate(runtime, pinned)
    assert not refused["allowed"]
    assert "spec.nodeName is set" in refused["status"]["message"]


def test_a_pod_no_limit_could_ever_hold_is_refused_naming_the_limit(tmp_path: Path) -> None:
    cluster = tmp_path / "cluster"
    shutil.copytree(ROOT / "examples" / "cluster", cluster)
    (cluster / "lab.yaml").write_text(yaml.safe_dump({
        "apiVersion": "kgwe.io/v1alpha1", "kind": "TenantQuota", "metadata": {"name": "lab"},
        "spec": {"tenant": "lab", "namespaces": ["lab"],
                 "limits": [{"acceleratorType": "nvidia-h100-80gb", "gpus": 4}]},
    }))
    runtime = build_runtime(load_config(ROOT / "examples" / "config.yaml"), cluster)
    refused = review_pod(runtime.admission, gpu_pod("lab", "huge", 6, H100), "alice")
    assert not refused.allowed
    assert refused.message == ("tenant lab: nvidia-h100-80gb limit 4 GPUs, this pod asks 6; this pod could never "
                               "run within it")


def test_a_pod_of_a_tenant_without_a_quota_is_not_gated(runtime: Runtime) -> None:
    result = review_pod(runtime.admission, gpu_pod("default", "free", 1, H100), "dave")
    assert result.allowed, result.message
    assert GATE not in gates(result.object)
    assert result.quota is None


def test_over_quota_refuse_answers_early(tmp_path: Path) -> None:
    config = parse_config(yaml.safe_dump({**yaml.safe_load((ROOT / "examples" / "config.yaml").read_text()),
                                          "quotas": {"overQuota": "refuse"}}))
    runtime = build_runtime(config, ROOT / "examples" / "cluster")
    refused = review_pod(runtime.admission, gpu_pod("team-a", "b", 6, H100), "alice")
    assert not refused.allowed
    assert refused.message == ("team-a: nvidia-h100-80gb 4 of 8 GPUs in use; this pod asks 6; 1st in line "
                               "(quotas.overQuota: refuse)")
    assert review_pod(runtime.admission, gpu_pod("team-a", "a", 4, H100), "alice").allowed


def test_namespaces_deferred_to_kueue_get_no_quota_gate() -> None:
    raw = yaml.safe_load((ROOT / "examples" / "config.yaml").read_text())
    raw["quotas"] = {"deferTo": "kueue", "deferNamespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name":
                                                                                      "team-a"}}}
    runtime = build_runtime(parse_config(yaml.safe_dump(raw)), ROOT / "examples" / "cluster")
    team_a = review_pod(runtime.admission, gpu_pod("team-a", "a", 1, H100), "alice")
    assert team_a.allowed and GATE not in gates(team_a.object)
    research = review_pod(runtime.admission, gpu_pod("ml-research", "r", 1, H100), "carol")
    assert GATE in gates(research.object)


def test_only_kgwe_lifts_the_quota_gate(runtime: Runtime) -> None:
    gated = review_pod(runtime.admission, gpu_pod("team-a", "a", 1, H100), "alice").object
    gated["metadata"]["uid"] = "u-1"
    lifted = copy.deepcopy(gated)
    lifted["spec"]["schedulingGates"] = []
    review = create_review(lifted, "alice", [])
    review["request"]["operation"] = "UPDATE"
    review["request"]["oldObject"] = gated
    refused = answer(runtime.admission, review, False, 5.0)
    assert not refused["allowed"]
    assert "kgwe.io/quota when the tenant's quota holds the pod" in refused["status"]["message"]


def test_group_based_tenant_is_gated_outside_its_namespaces(runtime: Runtime) -> None:
    result = review_pod(runtime.admission, gpu_pod("default", "nb-1", 8, H100), "carol", ["ml-researchers"])
    assert result.allowed, result.message
    assert result.object["metadata"]["annotations"]["kgwe.io/tenant"] == "ml-research"
    assert GATE in gates(result.object)


def test_pods_in_the_directory_decide_the_answer(tmp_path: Path) -> None:
    """Directory mode: the same rule from the pods in the directory (gated ones hold nothing)."""
    cluster = tmp_path / "cluster"
    shutil.copytree(ROOT / "examples" / "cluster", cluster)
    runtime = build_runtime(load_config(ROOT / "examples" / "config.yaml"), cluster)
    waiting = review_pod(runtime.admission, gpu_pod("team-a", "w", 4, H100), "alice").object
    waiting["metadata"]["creationTimestamp"] = "2026-11-29T00:00:00Z"
    running = copy.deepcopy(waiting)
    running["metadata"]["name"] = "r"
    running["spec"]["schedulingGates"] = []
    (cluster / "more-pods.yaml").write_text(yaml.safe_dump_all([waiting, running]))
    runtime = build_runtime(load_config(ROOT / "examples" / "config.yaml"), cluster)
    # 4 + 4 released hold all 8; the gated `w` holds nothing but is ahead in line.
    later = review_pod(runtime.admission, gpu_pod("team-a", "x", 1, H100), "alice")
    assert later.quota == ("would wait for quota (team-a: nvidia-h100-80gb 8 of 8 GPUs in use; this pod asks 1; "
                           "2nd in line)")
