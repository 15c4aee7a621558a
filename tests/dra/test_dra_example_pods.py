"""examples/pods-dra: each pod, reviewed against examples/cluster-dra, is admitted with the claim its comment
describes, and the ResourceClaimTemplate it creates is valid `resource.k8s.io/v1` of Kubernetes 1.36."""

from __future__ import annotations

from typing import Any

import kubernetes_validate
import pytest
import yaml
from dra_support import DRA_CLUSTER, ROOT

from webhook.assembly import build_runtime
from webhook.config import Config
from webhook.review import review_pod
from webhook.runtime import Runtime

PODS = ROOT / "examples" / "pods-dra"


@pytest.fixture(scope="module")
def runtime() -> Runtime:
    return build_runtime(Config.model_validate({"mode": "enforce"}), DRA_CLUSTER)


def devices(runtime: Runtime, name: str) -> dict[str, Any]:
    pod = yaml.safe_load((PODS / name).read_text())
    result = review_pod(runtime.admission, pod)
    assert result.allowed, result.message
    (template,) = result.creates
    kubernetes_validate.validate(template, "1.36", strict=True)
    spec: dict[str, Any] = template["spec"]["spec"]["devices"]
    return spec


def test_every_example_is_covered() -> None:
    assert sorted(p.name for p in PODS.glob("*.yaml")) == [
        "01-gpu-beside-nic.yaml", "02-gpu-share.yaml", "03-small-partition.yaml", "04-tolerate-device-taint.yaml"]


def test_gpus_beside_nics(runtime: Runtime) -> None:
    claim = devices(runtime, "01-gpu-beside-nic.yaml")
    assert [r["name"] for r in claim["requests"]] == ["gpu-0", "nic-0", "gpu-1", "nic-1"]
    assert {c["matchAttribute"] for c in claim["constraints"]} == {
        "resource.kubernetes.io/pcieRoot", "gpu.nvidia.com/productName"}


def test_a_share_of_a_gpu(runtime: Runtime) -> None:
    (request,) = devices(runtime, "02-gpu-share.yaml")["requests"]
    assert request["exactly"]["capacity"] == {"requests": {"shares": "1"}}


def test_the_smallest_free_partition_first(runtime: Runtime) -> None:
    (request,) = devices(runtime, "03-small-partition.yaml")["requests"]
    assert [s["name"] for s in request["firstAvailable"]][:2] == ["mig-1g-24gb", "mig-2g-24gb"]


def test_a_device_taint_tolerated(runtime: Runtime) -> None:
    (request,) = devices(runtime, "04-tolerate-device-taint.yaml")["requests"]
    assert request["exactly"]["tolerations"] == [
        {"key": "gpu.nvidia.com/gpu-lost", "operator": "Exists", "effect": "NoSchedule"}]
