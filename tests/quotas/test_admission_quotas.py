"""Quotas end to end: the example cluster, the webhooks' admission path, real AdmissionReview JSON.

The example cluster's team-a has 8 H100s, 4 held by `train-llm-0`; `batch-done` (8 H100s) has Succeeded.
"""

from __future__ import annotations

from typing import Any

import jsonpatch
import pytest
from quota_fixtures import ROOT

from webhook.config import load_config
from webhook.review import answer, create_review, decoded_patch, review_pod
from webhook.runtime import Runtime, build_runtime

H100 = {"kgwe.io/accelerator": "nvidia-h100-80gb"}


def gpu_pod(namespace: str, name: str, gpus: int, annotations: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "annotations": dict(annotations)},
        "spec": {"containers": [{"name": "main", "image": "cuda", "resources": {"limits": {"nvidia.com/gpu": gpus}}}]},
    }


@pytest.fixture
def runtime() -> Runtime:
    return build_runtime(load_config(ROOT / "examples" / "config.yaml"), ROOT / "examples" / "cluster")


def test_finished_pods_do_not_count_and_admitted_pods_do(runtime: Runtime) -> None:
    # 4 running + 4 asked = 8: admitted, which it would not be if the Succeeded batch pod still counted.
    first = review_pod(runtime.admission, gpu_pod("team-a", "a", 4, H100), "alice")
    assert first.allowed, first.message
    assert first.object["metadata"]["annotations"]["kgwe.io/tenant"] == "team-a"
    # `a` is not in the pod list yet; its reservation holds its GPUs.
    second = review_pod(runtime.admission, gpu_pod("team-a", "b", 1, H100), "alice")
    assert not second.allowed
    assert "tenant team-a: nvidia-h100-80gb 8 of 8 GPUs in use, this pod asks for 1" in second.message


def test_dry_run_admission_reserves_nothing(runtime: Runtime) -> None:
    mutate_review = create_review(gpu_pod("team-a", "dry", 4, H100), "alice", [])
    mutate_review["request"]["dryRun"] = True
    patch = decoded_patch(answer(runtime.admission, mutate_review, True, 5.0))
    validate_review = create_review(jsonpatch.apply_patch(mutate_review["request"]["object"], patch), "alice", [])
    validate_review["request"]["dryRun"] = True
    assert answer(runtime.admission, validate_review, False, 5.0)["allowed"]
    # Had the dry run reserved its 4 GPUs, this pod would not fit.
    assert review_pod(runtime.admission, gpu_pod("team-a", "real", 4, H100), "alice").allowed


def test_group_based_tenant_outside_its_namespaces(runtime: Runtime) -> None:
    researcher = ("carol", ["ml-researchers"])
    for name in ("nb-1", "nb-2"):
        result = review_pod(runtime.admission, gpu_pod("default", name, 8, H100), *researcher)
        assert result.allowed, result.message
        assert result.object["metadata"]["annotations"]["kgwe.io/tenant"] == "ml-research"
    refused = review_pod(runtime.admission, gpu_pod("default", "nb-3", 1, H100), *researcher)
    assert "tenant ml-research: nvidia-h100-80gb 16 of 16 GPUs in use, this pod asks for 1" in refused.message
    # The same pod from someone outside the group is charged to the namespace's tenant, which has no quota.
    assert review_pod(runtime.admission, gpu_pod("default", "nb-3", 1, H100), "dave").allowed
