"""Intent rendered with Kubernetes 1.36's DRA device model, by a webhook runtime that reads the cluster from
the fake API server (examples/cluster-dra as the API serves it) and creates its ResourceClaimTemplates
there: the pod's tolerations of device taints, the smallest free partition first, a share of a GPU through
consumable capacity (`kgwe.io/sharing: mps`), and `kgwe.io/topology: pcie` as GPUs beside NICs. Every
template KGWE creates is valid `resource.k8s.io/v1` of Kubernetes 1.36."""

from __future__ import annotations

import time
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
from dra_support import DRA_CLUSTER, ROOT, gpu_pod
from kube_fake_apiserver import FakeApiServer, serving_cluster
from kubernetes import client as k8s_client
from patience import WAIT_SECONDS

from webhook.assembly import Assembly, build_runtime, from_api
from webhook.config import Config
from webhook.costs import pod_hourly_cost
from webhook.review import ReviewResult, review_pod

KUBERNETES = "1.36"
PRICES = {"nvidia-h100-80gb": 4.5, "nvidia-a100-80gb": 2.8, "nvidia-gb200-186gb": 9.0, "nvidia-h100-94gb": 3.5,
          "nvidia-l40s-48gb": 1.6}
LOST = {"key": "gpu.nvidia.com/gpu-lost", "operator": "Exists", "effect": "NoSchedule"}


@pytest.fixture(scope="module")
def api() -> Iterator[FakeApiServer]:
    server = serving_cluster(DRA_CLUSTER)
    yield server
    server.close()


def _assembly(api: FakeApiServer, **config: Any) -> Assembly:
    configuration = k8s_client.Configuration()
    configuration.host = api.url
    client = k8s_client.ApiClient(configuration)
    settings = Config.model_validate({"mode": "enforce", "pricing": {"currency": "USD", "perGPUHour": PRICES},
                                      **config})
    return from_api(settings, client, serving=True)


@pytest.fixture(scope="module")
def cluster(api: FakeApiServer) -> Iterator[Assembly]:
    assembly = _assembly(api)
    yield assembly
    assembly.stop_source()
    assembly.api_client.close()


def create(cluster: Assembly, pod: dict[str, Any]) -> ReviewResult:
    return review_pod(cluster.runtime.admission, pod)


def template(api: FakeApiServer, result: ReviewResult) -> dict[str, Any]:
    """The one ResourceClaimTemplate the pod names, as KGWE created it in the API server; valid 1.36."""
    (entry,) = [c for c in result.object["spec"]["resourceClaims"] if c["name"].startswith("kgwe-gpu-")]
    stored = api.objects("ResourceClaimTemplate")[f"default/{entry['resourceClaimTemplateName']}"]
    kubernetes_validate.validate(stored, KUBERNETES, strict=True)
    return stored


def devices(api: FakeApiServer, result: ReviewResult) -> dict[str, Any]:
    assert result.allowed, result.message
    spec: dict[str, Any] = template(api, result)["spec"]["spec"]["devices"]
    return spec


def wait_for(cluster: Assembly, check: Any) -> None:
    deadline = time.monotonic() + WAIT_SECONDS
    while not check(cluster.runtime.store.snapshot()):
        assert time.monotonic() < deadline, "the API's change never reached the model"
        time.sleep(0.02)


# -- device taints -------------------------------------------------------------------------------------

def test_a_claim_tolerates_the_device_taints_the_pod_tolerates(api: FakeApiServer, cluster: Assembly) -> None:
    pod = gpu_pod("lost-ok", {"kgwe.io/accelerator": "nvidia-h100-94gb"})
    pod["spec"]["tolerations"] = [LOST, {"operator": "Exists"}, {"key": "example.com/other", "operator": "Exists"}]
    (request,) = devices(api, create(cluster, pod))["requests"]
    # Only the toleration that names a taint the type's devices carry is carried to the devices: not the
    # keyless one (tolerating every node taint is no wish for a broken GPU), not one of a taint nobody has.
    assert request["exactly"]["tolerations"] == [LOST]
    plain = gpu_pod("lost-not-ok", {"kgwe.io/accelerator": "nvidia-h100-94gb"})
    plain["spec"]["tolerations"] = [{"operator": "Exists"}]
    (request,) = devices(api, create(cluster, plain))["requests"]
    assert "tolerations" not in request["exactly"]


def test_informational_taints_need_no_toleration(api: FakeApiServer, cluster: Assembly) -> None:
    pod = gpu_pod("xid-none", {"kgwe.io/accelerator": "nvidia-l40s-48gb"})
    pod["spec"]["tolerations"] = [{"key": "gpu.nvidia.com/xid", "operator": "Exists"}]
    (request,) = devices(api, create(cluster, pod))["requests"]
    # gpu-1's xid taint has effect None: nothing to tolerate (and the GPU counts as available without it,
    # tests/dra/test_dra_device_facts.py).
    assert "tolerations" not in request["exactly"]


# -- partitionable devices ------------------------------------------------------------------------------

def test_a_small_gpu_is_the_smallest_partition_free_now_first(api: FakeApiServer, cluster: Assembly) -> None:
    pod = gpu_pod("small", {"kgwe.io/sharing": "mig", "kgwe.io/gpu-memory": "8Gi"})
    first = [s["name"] for s in devices(api, create(cluster, pod))["requests"][0]["firstAvailable"]]
    assert first[:2] == ["mig-1g-10gb", "mig-1g-12gb"]
    # Every 1g.10gb of dra-a100-01 taken: dra-h100nvl-01's 1g.12gb (free on gpu-0's slices 4-6) comes first,
    # the larger profiles after it, and the 1g.10gb last (taken now; the scheduler still tries it).
    taken = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
             "metadata": {"name": "batch-gpu-6x7tk", "namespace": "inference"},
             "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "mig.nvidia.com",
                                                                           "count": 6}}]}},
             "status": {"allocation": {"devices": {"results": [
                 {"request": "gpu", "driver": "gpu.nvidia.com", "pool": "dra-a100-01",
                  "device": f"gpu-2-mig-1g10gb-{i}"} for i in range(1, 7)]}}}}
    kubernetes_validate.validate(taken, KUBERNETES, strict=True)
    api.put("ResourceClaim", taken)
    try:
        wait_for(cluster, lambda m: m.nodes["dra-a100-01"].dra.free_mig()["1g.10gb"] == 0)
        result = create(cluster, gpu_pod("small-2", {"kgwe.io/sharing": "mig", "kgwe.io/gpu-memory": "8Gi"}))
        order = [s["name"] for s in devices(api, result)["requests"][0]["firstAvailable"]]
        assert order == ["mig-1g-12gb", "mig-1g-24gb", "mig-2g-24gb", "mig-3g-40gb", "mig-3g-47gb", "mig-4g-47gb",
                         "mig-7g-94gb", "mig-1g-10gb"]
        assert '"mig":"1g.12gb/dra"' in result.object["metadata"]["annotations"]["kgwe.io/decision"]
        assert result.object["metadata"]["annotations"]["kgwe.io/hourly-cost"] == "0.5"  # 1/7 of 3.50
    finally:
        api.delete("ResourceClaim", "inference/batch-gpu-6x7tk")
        wait_for(cluster, lambda m: m.nodes["dra-a100-01"].dra.free_mig()["1g.10gb"] == 6)


def test_a_partition_no_node_can_hold_is_refused(cluster: Assembly) -> None:
    result = create(cluster, gpu_pod("three", {"kgwe.io/accelerator": "nvidia-h100-94gb", "kgwe.io/sharing": "mig",
                                                "kgwe.io/gpu-memory": "48Gi"}, gpus=3))
    assert not result.allowed
    assert "this pod asks for 3 MIG slices on one node; the most any node has is 2 (7g.94gb: 2)" in result.message


# -- consumable capacity ----------------------------------------------------------------------------------

def test_a_fraction_is_a_share_of_a_gpu_that_allows_multiple_allocations(api: FakeApiServer, cluster: Assembly) -> None:
    result = create(cluster, gpu_pod("quarter", {"kgwe.io/sharing": "mps", "kgwe.io/gpu-fraction": "0.25"}))
    (request,) = devices(api, result)["requests"]
    assert request["exactly"] == {
        "deviceClassName": "gpu.nvidia.com", "allocationMode": "ExactCount", "count": 1,
        "selectors": [{"cel": {"expression": 'device.allowMultipleAllocations == true && '
                                             'device.attributes["gpu.nvidia.com"].productName == "NVIDIA L40S"'}}],
        "capacity": {"requests": {"shares": "1"}},  # 0.25 of the 4 shares NVIDIA's driver publishes
    }
    notes = result.object["metadata"]["annotations"]
    assert notes["kgwe.io/accelerator-type"] == "nvidia-l40s-48gb"
    assert notes["kgwe.io/hourly-cost"] == "0.4"  # a quarter of 1.60
    assert "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE" not in str(result.object)  # no MPS daemon: the driver's accounting
    # Bound, it is charged its share, not the whole GPU the claim names.
    model = cluster.runtime.store.snapshot()
    bound = {**result.object, "spec": {**result.object["spec"], "nodeName": "dra-l40s-01"}}
    assert pod_hourly_cost(bound, model.nodes["dra-l40s-01"], "nvidia-l40s-48gb", model,
                           cluster.runtime.config) == Decimal("0.4")


def test_memory_is_a_share_of_memory_rounded_by_the_policy(api: FakeApiServer, cluster: Assembly) -> None:
    result = create(cluster, gpu_pod("mem", {"kgwe.io/sharing": "mps", "kgwe.io/gpu-memory": "10000Ki"}))
    (request,) = devices(api, result)["requests"]
    # 10000Ki rounded up to the driver's 1Mi step; the share not asked takes its default (1 of 4 shares).
    assert request["exactly"]["capacity"] == {"requests": {"memory": "10Mi"}}
    assert result.object["metadata"]["annotations"]["kgwe.io/hourly-cost"] == "0.4"


def test_a_whole_gpu_of_a_shared_type_takes_all_of_it(api: FakeApiServer, cluster: Assembly) -> None:
    (request,) = devices(api, create(cluster, gpu_pod("whole", {"kgwe.io/accelerator": "nvidia-l40s-48gb"})))[
        "requests"]
    # Without capacity requests it would take one share and no memory, and share the GPU with others.
    assert request["exactly"]["capacity"] == {"requests": {"memory": "46068Mi", "shares": "4"}}
    assert "allowMultipleAllocations" not in request["exactly"]["selectors"][0]["cel"]["expression"]


@pytest.mark.parametrize(("annotations", "gpus", "fragment"), [
    ({"kgwe.io/accelerator": "nvidia-h100-80gb", "kgwe.io/sharing": "mps", "kgwe.io/gpu-fraction": "0.5"}, 1,
     "MPS sharing: no nvidia-h100-80gb node is shared with MPS (no DRA GPU allows multiple allocations)"),
    ({"kgwe.io/sharing": "mps", "kgwe.io/gpu-memory": "47Gi"}, 1,
     "(the shared DRA GPUs of nvidia-l40s-48gb cannot give 47Gi)"),
    ({"kgwe.io/sharing": "mps", "kgwe.io/gpu-fraction": "0.5"}, 2,
     "MPS sharing gives each container one share of one GPU; a container asks for 2"),
    ({"kgwe.io/sharing": "time-slicing"}, 1, "time-slicing: no GPU node is time-sliced"),
])
def test_shares_no_gpu_could_give_are_refused(cluster: Assembly, annotations: dict[str, str], gpus: int,
                                              fragment: str) -> None:
    result = create(cluster, gpu_pod("nope", annotations, gpus=gpus))
    assert not result.allowed
    assert fragment in result.message


# -- PCIe alignment ----------------------------------------------------------------------------------------

def test_pcie_topology_pairs_each_gpu_with_a_nic_under_one_root(api: FakeApiServer, cluster: Assembly) -> None:
    claim = devices(api, create(cluster, gpu_pod(
        "rdma", {"kgwe.io/accelerator": "nvidia-h100-80gb", "kgwe.io/topology": "pcie"}, gpus=2)))
    assert [r["name"] for r in claim["requests"]] == ["gpu-0", "nic-0", "gpu-1", "nic-1"]
    assert claim["requests"][0]["exactly"]["count"] == 1
    assert claim["requests"][1]["exactly"] == {"deviceClassName": "dranet", "allocationMode": "ExactCount", "count": 1}
    assert claim["constraints"] == [
        {"requests": ["gpu-0", "nic-0"], "matchAttribute": "resource.kubernetes.io/pcieRoot"},
        {"requests": ["gpu-1", "nic-1"], "matchAttribute": "resource.kubernetes.io/pcieRoot"},
        {"requests": ["gpu-0", "gpu-1"], "matchAttribute": "gpu.nvidia.com/productName"},
    ]
    one = devices(api, create(cluster, gpu_pod(
        "rdma-1", {"kgwe.io/accelerator": "nvidia-h100-80gb", "kgwe.io/topology": "pcie"})))
    assert [r["name"] for r in one["requests"]] == ["gpu", "nic"]
    assert one["constraints"] == [{"requests": ["gpu", "nic"], "matchAttribute": "resource.kubernetes.io/pcieRoot"}]


def test_pcie_topology_keeps_the_types_that_publish_roots(api: FakeApiServer, cluster: Assembly) -> None:
    result = create(cluster, gpu_pod("rdma-any", {"kgwe.io/accelerator": "nvidia-gb200-186gb,nvidia-h100-80gb",
                                                  "kgwe.io/topology": "pcie"}))
    (gpu, _nic) = devices(api, result)["requests"]
    assert "NVIDIA H100 80GB HBM3" in gpu["exactly"]["selectors"][0]["cel"]["expression"]


@pytest.mark.parametrize(("annotations", "gpus", "fragment"), [
    ({"kgwe.io/accelerator": "nvidia-h100-80gb"}, 5,
     "kgwe.io/topology pcie: this pod asks for 5 GPUs each beside a NIC under one PCIe root; the most any "
     "nvidia-h100-80gb node has is 4 (dranet NICs (driver dra.net) publishing resource.kubernetes.io/pcieRoot"),
    ({"kgwe.io/accelerator": "nvidia-gb200-186gb"}, 1,
     "kgwe.io/topology pcie: no nvidia-gb200-186gb DRA device publishes resource.kubernetes.io/pcieRoot"),
])
def test_pcie_topology_no_node_could_satisfy_is_refused(cluster: Assembly, annotations: dict[str, str], gpus: int,
                                                        fragment: str) -> None:
    result = create(cluster, gpu_pod("rdma-no", {**annotations, "kgwe.io/topology": "pcie"}, gpus=gpus))
    assert not result.allowed
    assert fragment in result.message


def test_pcie_topology_without_the_nic_class_is_refused(api: FakeApiServer) -> None:
    assembly = _assembly(api, dra={"nicDeviceClass": "rdma.example.com"})
    try:
        result = create(assembly, gpu_pod("rdma", {"kgwe.io/accelerator": "nvidia-h100-80gb",
                                                   "kgwe.io/topology": "pcie"}))
    finally:
        assembly.stop_source()
        assembly.api_client.close()
    assert not result.allowed
    assert ("kgwe.io/topology pcie: the NIC DeviceClass rdma.example.com (dra.nicDeviceClass) does not exist; "
            "this cluster has compute-domain-default-channel.nvidia.com, dranet, gpu.nvidia.com, mig.nvidia.com"
            ) in result.message


def test_pcie_topology_on_device_plugin_nodes_is_refused(tmp_path: Path) -> None:
    runtime = build_runtime(Config(), ROOT / "examples" / "cluster")
    result = review_pod(runtime.admission, gpu_pod("rdma", {"kgwe.io/topology": "pcie"}))
    assert not result.allowed
    assert "kgwe.io/topology pcie: GPUs beside NICs under one PCIe root are asked through DRA claims" in result.message


@pytest.mark.parametrize("annotations", [
    {"kgwe.io/sharing": "mps", "kgwe.io/gpu-fraction": "0.25"},
    {"kgwe.io/sharing": "mps", "kgwe.io/gpu-memory": "10Gi"},
    {"kgwe.io/accelerator": "nvidia-h100-80gb", "kgwe.io/topology": "pcie"},
    {"kgwe.io/accelerator": "nvidia-h100-94gb", "kgwe.io/sharing": "mig", "kgwe.io/gpu-memory": "10Gi"},
])
def test_a_second_pass_changes_nothing(cluster: Assembly, annotations: dict[str, str]) -> None:
    pod = gpu_pod("again", annotations, gpus=2 if "kgwe.io/topology" in annotations else 1)
    pod["spec"]["tolerations"] = [LOST]
    once = create(cluster, pod)
    assert once.allowed, once.message
    twice = create(cluster, once.object)
    assert twice.allowed and twice.patch == []
