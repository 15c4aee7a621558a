"""ResourceSlices, DeviceClasses and allocated ResourceClaims as cluster facts: from the YAML directory
and from the (fake) API server; pool generations, other drivers and hostile slices; the backend per node."""

from __future__ import annotations

import copy
import time
from decimal import Decimal
from pathlib import Path
from typing import Any

import orjson
from dra_support import DRA_CLUSTER, gpu_pod, review
from kube_fake_apiserver import FakeApiServer
from kubernetes import client as k8s_client
from patience import WAIT_SECONDS

from policies.vocabulary.accelerator_types import default_table
from webhook.admission.request import decode_review
from webhook.assembly import build_runtime
from webhook.cluster.kube_json import KubeJson
from webhook.cluster.kube_source import KubeClusterSource
from webhook.cluster.model import ClusterStore
from webhook.cluster.yaml_source import iter_manifests
from webhook.config import Config
from webhook.costs import pod_hourly_cost
from webhook.dra.backend import node_backend
from webhook.dra.facts import parse_slices
from webhook.dra.templates import KubeTemplateWriter
from webhook.inventory.capacity import Inventory
from webhook.inventory.nodes import nodes_view
from webhook.runtime import Runtime


def test_dra_only_nodes_are_typed_and_counted(dra_runtime: Runtime) -> None:
    model = dra_runtime.store.snapshot()
    h100 = model.nodes["dra-h100-01"]
    assert (h100.accelerator_type, h100.type_source, h100.gpu_count, h100.gpu_memory_mib) == (
        "nvidia-h100-80gb", "dra", 8, 81559,
    )
    assert h100.nvlink_domain_size == 8
    a100 = model.nodes["dra-a100-01"]
    assert (a100.gpu_count, a100.mig_strategy, a100.mig_profiles) == (4, "dra", {"1g.10gb": 7, "3g.40gb": 2})
    assert model.types["nvidia-h100-80gb"].gpus_total == 16
    assert model.types["nvidia-h100-80gb"].dra_products == {"NVIDIA H100 80GB HBM3"}
    assert set(model.device_classes) == {
        "gpu.nvidia.com", "mig.nvidia.com", "compute-domain-default-channel.nvidia.com", "dranet"
    }


def test_node_view_counts_allocated_claims(dra_runtime: Runtime) -> None:
    view = nodes_view(Inventory(dra_runtime.store.snapshot(), dra_runtime.config))
    rows = {row["name"]: row for row in view["nodes"]}
    assert rows["dra-h100-01"]["allocatable"] == {"gpu.nvidia.com": 8}
    assert rows["dra-h100-01"]["used"] == {"gpu.nvidia.com": 2}
    assert rows["dra-a100-01"]["used"] == {"mig.nvidia.com/1g.10gb": 1}
    types = {row["id"]: row for row in view["types"]}
    assert types["nvidia-h100-80gb"]["available"] == 14


def _slice(node: str, generation: int, devices: list[dict[str, Any]], driver: str = "gpu.nvidia.com") -> dict[str, Any]:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": f"{node}-{generation}"},
            "spec": {"driver": driver, "nodeName": node, "pool": {"name": node, "generation": generation},
                     "devices": devices}}


def _gpu(name: str, product: str) -> dict[str, Any]:
    return {"name": name, "attributes": {"type": {"string": "gpu"}, "productName": {"string": product}},
            "capacity": {"memory": {"value": "80Gi"}}}


def test_slices_are_read_defensively() -> None:
    table = default_table()
    old = _slice("n1", 1, [_gpu("gpu-0", "NVIDIA A100-SXM4-80GB")])
    new = _slice("n1", 2, [_gpu("gpu-0", "NVIDIA H100 80GB HBM3")])
    other = _slice("n1", 5, [_gpu("nic-0", "NVIDIA H100 80GB HBM3")], driver="net.example.com")
    qualified = _slice("n2", 1, [{"name": "gpu-0", "attributes": {
        "gpu.nvidia.com/productName": {"string": "NVIDIA L4"}, "gpu.nvidia.com/type": {"string": "gpu"}}}])
    flood = _slice("n3", 1, [_gpu(f"gpu-{i}", "NVIDIA L4") for i in range(1000)])
    junk = _slice("n4", 1, ["not a device", {"name": ""}, {"name": "x", "attributes": "nope"}])  # type: ignore[list-item]
    devices = parse_slices([old, new, other, qualified, flood, junk], table)
    assert [(d.name, d.type_id) for d in devices["n1"]] == [("gpu-0", "nvidia-h100-80gb")]  # newest generation only
    assert [d.type_id for d in devices["n2"]] == ["nvidia-l4-24gb"]
    assert len(devices["n3"]) == 128  # the API's limit per slice
    assert "n4" not in devices


def test_backend_per_node_pool() -> None:
    store = ClusterStore(default_table())
    both = {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": "both", "labels": {"pool": "migrating"}},
            "status": {"allocatable": {"nvidia.com/gpu": "8"}}}
    store.replace_all([both, _slice("both", 1, [_gpu(f"gpu-{i}", "NVIDIA H100 80GB HBM3") for i in range(8)])])
    facts = store.snapshot().nodes["both"]
    assert node_backend(facts, Config().dra) == "device-plugin"  # auto: the device plugin still advertises
    forced = Config.model_validate({"dra": {"nodePools": [{"nodeSelector": {"pool": "migrating"}, "backend": "dra"}]}})
    assert node_backend(facts, forced.dra) == "dra"
    assert node_backend(facts, Config.model_validate({"dra": {"backend": "dra"}}).dra) == "dra"


def test_dra_objects_come_from_the_api_and_follow_allocation(fake_api: FakeApiServer) -> None:
    for _path, obj in iter_manifests(DRA_CLUSTER):
        if obj["kind"] in ("Node", "ResourceSlice", "DeviceClass", "ResourceClaim", "Namespace"):
            fake_api.put(obj["kind"], obj)
    configuration = k8s_client.Configuration()
    configuration.host = fake_api.url
    with k8s_client.ApiClient(configuration) as api:
        store = ClusterStore(default_table(), min_rebuild_interval=0)
        source = KubeClusterSource(store, api, backoff_base=0.01, missing_crd_retry_seconds=0.1)
        source.start()
        try:
            assert source.wait_loaded(20)
            model = store.snapshot()
            assert model.nodes["dra-gb200-racka-tray1"].accelerator_type == "nvidia-gb200-186gb"
            assert model.nodes["dra-h100-01"].dra is not None
            assert model.nodes["dra-h100-01"].dra.allocated_gpus() == 2
            claim = copy.deepcopy(next(o for _p, o in iter_manifests(DRA_CLUSTER)
                                       if o["kind"] == "ResourceClaim" and o["metadata"]["namespace"] == "team-a"))
            claim["status"]["allocation"]["devices"]["results"].append(
                {"request": "gpu", "driver": "gpu.nvidia.com", "pool": "dra-h100-01", "device": "gpu-2"})
            fake_api.put("ResourceClaim", claim)
            deadline = time.monotonic() + WAIT_SECONDS
            while store.snapshot().nodes["dra-h100-01"].dra.allocated_gpus() != 3:  # type: ignore[union-attr]
                assert time.monotonic() < deadline, "the claim's allocation never reached the model"
                time.sleep(0.02)
        finally:
            source.stop()



def test_bound_dra_mig_pod_is_charged_as_its_slice(dra_runtime: Runtime) -> None:
    model = dra_runtime.store.snapshot()
    pod = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "nb", "namespace": "default", "annotations": {
            "kgwe.io/dra-claims": '{"main":{"nvidia.com/gpu":"1"}}',
            "kgwe.io/decision": '{"v":1,"steps":["mig","dra"],"mig":"1g.10gb/dra"}',
        }},
        "spec": {"nodeName": "dra-a100-01", "containers": [
            {"name": "main", "image": "cuda", "resources": {"claims": [{"name": "kgwe-gpu-0d6e4079e3"}]}}]},
    }
    cost = pod_hourly_cost(pod, model.nodes["dra-a100-01"], "nvidia-a100-80gb", model, dra_runtime.config)
    assert cost is not None and round(cost, 2) == Decimal("0.40")  # 2.80 x 1/7, not a whole GPU
    pod["spec"]["containers"][0]["resources"] = {}  # without KGWE's claim the annotation counts nothing
    assert pod_hourly_cost(pod, model.nodes["dra-a100-01"], "nvidia-a100-80gb", model, dra_runtime.config) == 0


def test_audit_mode_reports_but_creates_no_template(dra_dir: Path, fake_api: FakeApiServer) -> None:
    config = Config.model_validate({"mode": "audit"})
    runtime = build_runtime(config, dra_dir / "cluster")
    configuration = k8s_client.Configuration()
    configuration.host = fake_api.url
    with k8s_client.ApiClient(configuration) as api:
        runtime.claim_templates = KubeTemplateWriter(KubeJson(api))
        before = len([r for r in fake_api.requests if r.method == "POST"])
        pod = gpu_pod("audited", {"kgwe.io/accelerator": "nvidia-h100-80gb"}, gpus=7)
        outcome = runtime.admission.mutate(decode_review(orjson.dumps(review(pod))))
    assert outcome.patch == []
    assert any("would mutate" in w and "dra" in w for w in outcome.warnings)
    assert len([r for r in fake_api.requests if r.method == "POST"]) == before
