"""Kubernetes 1.36's DRA device model read as facts, from the fake API server serving examples/cluster-dra:
device taints, partitionable devices (NVIDIA's dynamic MIG: counter sets in a slice of their own, every
MIG placement consuming them), consumable capacity (shares of a GPU, with allocations' consumedCapacity),
and other drivers' devices by PCIe root. Every object is as the 1.36 API serves it (schema-checked)."""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Iterator
from decimal import Decimal
from typing import Any

import kubernetes_validate
import pytest
from dra_support import DRA_CLUSTER
from kube_fake_apiserver import FakeApiServer, serving_cluster
from kubernetes import client as k8s_client
from patience import WAIT_SECONDS

from policies.vocabulary.accelerator_types import default_table
from policies.vocabulary.quantities import GIB, MIB
from webhook.cluster.device_classes import dra_allocatable, dra_used
from webhook.cluster.device_model import CapacityPolicy, DeviceTaint, read_capacities, read_taints, tolerates
from webhook.cluster.kube_source import KubeClusterSource
from webhook.cluster.model import ClusterModel, ClusterStore
from webhook.cluster.yaml_source import iter_manifests
from webhook.config import Config
from webhook.dra.facts import read_slices
from webhook.inventory.capacity import Inventory
from webhook.inventory.nodes import nodes_view

KUBERNETES = "1.36"
NVL = "dra-h100nvl-01"
L40S = "dra-l40s-01"
LOST = {"key": "gpu.nvidia.com/gpu-lost", "operator": "Exists", "effect": "NoSchedule"}


def test_every_example_object_is_valid_kubernetes_1_36() -> None:
    kinds = set()
    for path, obj in iter_manifests(DRA_CLUSTER):
        kubernetes_validate.validate(obj, KUBERNETES, strict=True)
        kinds.add(obj["kind"])
        spec = obj.get("spec") or {}
        # One of devices and sharedCounters per slice (1.35+), as NVIDIA's driver splits them.
        assert not (spec.get("devices") and spec.get("sharedCounters")), path
    assert {"ResourceSlice", "ResourceClaim", "DeviceClass", "Node"} <= kinds


@pytest.fixture(scope="module")
def api() -> Iterator[FakeApiServer]:
    server = serving_cluster(DRA_CLUSTER)
    yield server
    server.close()


@pytest.fixture(scope="module")
def store(api: FakeApiServer) -> Iterator[ClusterStore]:
    configuration = k8s_client.Configuration()
    configuration.host = api.url
    with k8s_client.ApiClient(configuration) as client:
        store = ClusterStore(default_table(), min_rebuild_interval=0)
        source = KubeClusterSource(store, client, backoff_base=0.01, missing_crd_retry_seconds=0.1)
        source.start()
        try:
            assert source.wait_loaded(20)
            yield store
        finally:
            source.stop()


def until(store: ClusterStore, check: Callable[[ClusterModel], bool]) -> ClusterModel:
    deadline = time.monotonic() + WAIT_SECONDS
    while True:
        model = store.snapshot()
        if check(model):
            return model
        assert time.monotonic() < deadline, "the API's change never reached the model"
        time.sleep(0.02)


def claim(name: str, pool: str, *devices: str, namespace: str = "inference", **extra: Any) -> dict[str, Any]:
    results = [{"request": "gpu", "driver": "gpu.nvidia.com", "pool": pool, "device": d, **extra} for d in devices]
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "mig.nvidia.com"}}]}},
            "status": {"allocation": {"devices": {"results": results}}}}


def test_partitions_are_free_only_while_their_counters_are(api: FakeApiServer, store: ClusterStore) -> None:
    model = store.snapshot()
    facts = model.nodes[NVL]
    dra = facts.dra
    assert dra is not None
    # 2 x H100 NVL, each a counter set (read from the slice that holds only counters) and 19 devices.
    assert (facts.accelerator_type, facts.gpu_count, len(dra.gpus), len(dra.mig)) == ("nvidia-h100-94gb", 2, 2, 36)
    assert set(dra.counters) == {(NVL, "gpu-0-counter-set"), (NVL, "gpu-1-counter-set")}
    # What each profile can hold at once: its placements, as the counters allow (not 38 devices).
    assert facts.mig_profiles == {"1g.12gb": 14, "1g.24gb": 8, "2g.24gb": 6, "3g.47gb": 4, "4g.47gb": 2, "7g.94gb": 2}
    # The example claim holds a 3g.47gb on memory slices 0-3 of gpu-0; gpu-1 is tainted gpu-lost.
    assert dra.free_gpus() == 0
    assert dra.free_mig() == {"1g.12gb": 3, "1g.24gb": 2, "2g.24gb": 1, "3g.47gb": 1, "4g.47gb": 0, "7g.94gb": 0}
    left = dra.counters_left()[(NVL, "gpu-0-counter-set")]
    assert left["multiprocessors"] == 132 - 60 and left["memory-slice-0"] == 0 and left["memory-slice-4"] == 1

    # A second claim takes the other 3g.47gb placement: nothing of gpu-0 is left.
    api.put("ResourceClaim", claim("notebook-3-gpu-x1", NVL, "gpu-0-mig-3g47gb-9-4"))
    model = until(store, lambda m: m.nodes[NVL].dra.free_mig().get("3g.47gb") == 0)  # type: ignore[union-attr]
    assert set(model.nodes[NVL].dra.free_mig().values()) == {0}  # type: ignore[union-attr]
    # Both claims released: gpu-0 whole, or any partition of it, again.
    api.delete("ResourceClaim", "inference/notebook-3-gpu-x1")
    api.delete("ResourceClaim", "inference/notebook-2-gpu-r7d5k")
    model = until(store, lambda m: m.nodes[NVL].dra.free_gpus() == 1)  # type: ignore[union-attr]
    assert model.nodes[NVL].dra.free_mig() == {  # type: ignore[union-attr]
        "1g.12gb": 7, "1g.24gb": 4, "2g.24gb": 3, "3g.47gb": 2, "4g.47gb": 1, "7g.94gb": 1}
    for _path, obj in iter_manifests(DRA_CLUSTER):
        if obj["kind"] == "ResourceClaim" and obj["metadata"]["name"] == "notebook-2-gpu-r7d5k":
            api.put("ResourceClaim", obj)
    until(store, lambda m: m.nodes[NVL].dra.free_gpus() == 0)  # type: ignore[union-attr]


def test_tainted_devices_are_not_available_unless_tolerated(store: ClusterStore) -> None:
    model = store.snapshot()
    nvl = model.nodes[NVL].dra
    assert nvl is not None
    # gpu-1 and its 18 partitions carry gpu-lost (NoSchedule); gpu-0's `unmonitored` has effect None.
    assert [d.name for d in nvl.tainted()][:2] == ["gpu-1", "gpu-1-mig-1g12gb-19-0"] and len(nvl.tainted()) == 19
    assert nvl.free_gpus([LOST]) == 1
    assert nvl.free_mig([LOST])["7g.94gb"] == 1
    assert nvl.free_mig([{"key": "gpu.nvidia.com/xid", "operator": "Exists"}])["7g.94gb"] == 0
    assert any("tainted gpu.nvidia.com/gpu-lost:NoSchedule (not available unless tolerated): gpu-1" in note
               for note in model.nodes[NVL].notes)
    # The node view and availability leave the tainted GPU out; an informational taint changes nothing.
    facts = model.nodes[NVL]
    assert dra_allocatable(facts)["gpu.nvidia.com"] == 1 and dra_allocatable(facts)["mig.nvidia.com/7g.94gb"] == 1
    assert dra_used(facts)["gpu.nvidia.com"] == 1  # gpu-0: a partition of it is allocated
    l40s = model.nodes[L40S].dra
    assert l40s is not None and l40s.tainted() == [] and l40s.gpus[1].taints[0].effect == "None"
    view = nodes_view(Inventory(model, Config()))
    rows = {row["name"]: row for row in view["nodes"]}
    assert rows[NVL]["allocatable"]["gpu.nvidia.com"] == 1
    types = {row["id"]: row for row in view["types"]}
    assert types["nvidia-l40s-48gb"]["available"] == 1  # gpu-1 (informational taint); gpu-0 holds a share


def test_shares_subtract_what_allocations_consumed(store: ClusterStore) -> None:
    dra = store.snapshot().nodes[L40S].dra
    assert dra is not None
    gpu0, gpu1 = dra.gpus
    assert gpu0.shared and dra.shared_gpus() == [gpu0, gpu1]
    memory = gpu0.capacity_policy("memory")
    assert memory == CapacityPolicy(46068 * MIB, Decimal(0), (), Decimal(0), 46068 * MIB, MIB)
    # The example claim's share (shareID, consumedCapacity: 20Gi, 2 shares) is subtracted from gpu-0 only.
    assert dra.capacity_left(gpu0, "memory") == 46068 * MIB - 20 * GIB
    assert dra.capacity_left(gpu0, "shares") == 2
    assert dra.capacity_left(gpu1, "shares") == 4
    assert dra.free_gpus() == 1  # a GPU with a share allocated is not free as a whole GPU


def test_other_drivers_devices_count_by_pcie_root(store: ClusterStore) -> None:
    model = store.snapshot()
    h100 = model.nodes["dra-h100-01"].dra
    assert h100 is not None
    assert h100.pcie_roots == {"dra.net": {"pci0000:10": 1, "pci0000:30": 1, "pci0000:50": 1, "pci0000:70": 1}}
    assert [d.pcie_root for d in h100.gpus][:3] == ["pci0000:10", "pci0000:10", "pci0000:30"]
    assert model.nodes["dra-h100-02"].dra.pcie_roots == {}  # type: ignore[union-attr]
    assert model.nodes["dra-gb200-racka-tray1"].dra.gpus[0].pcie_root is None  # type: ignore[union-attr]


def test_device_model_fields_are_read_defensively() -> None:
    junk_taints = {"taints": ["x", {"key": ""}, {"key": "k", "effect": "Unknown"}, *[{"key": f"t{i}",
                   "effect": "NoSchedule"} for i in range(40)]]}
    taints = read_taints(junk_taints)
    # At most 16 entries are read (the API's limit), junk ones skipped; an unknown effect is informational.
    assert len(taints) == 14 and taints[0] == DeviceTaint("k", "", "Unknown") and not taints[0].blocking
    assert not read_capacities({"capacity": {"memory": {"value": "1Gi"}}})  # not shared: nothing consumable
    shared = read_capacities({"allowMultipleAllocations": True, "capacity": {
        "memory": {"value": "8Gi", "requestPolicy": {"default": "1Gi", "validValues": ["1Gi", "4Gi", "8Gi"]}},
        "bad": {"value": "not a quantity"}, "shares": {"value": "10", "requestPolicy": "junk"}}})
    policies = dict(shared)
    assert set(policies) == {"memory", "shares"}
    assert policies["memory"].round_up(2 * GIB) == 4 * GIB and policies["memory"].round_up(9 * GIB) is None
    stepped = CapacityPolicy(Decimal(100), None, (), Decimal(10), Decimal(90), Decimal(20))
    assert [stepped.round_up(Decimal(a)) for a in (1, 11, 30, 31, 91)] == [10, 30, 30, 50, None]
    # Tolerations as the API matches them: key, Exists or Equal value, effect when given.
    lost = DeviceTaint("gpu.nvidia.com/gpu-lost", "", "NoSchedule")
    assert tolerates({"key": "gpu.nvidia.com/gpu-lost", "operator": "Exists"}, lost)
    assert tolerates({"operator": "Exists"}, lost)
    assert not tolerates({"key": "gpu.nvidia.com/gpu-lost", "operator": "Exists", "effect": "NoExecute"}, lost)
    assert not tolerates({"key": "gpu.nvidia.com/xid", "value": "79"},
                         DeviceTaint("gpu.nvidia.com/xid", "48", "NoSchedule"))
    # A slice whose counters or consumption are junk still gives its devices; absent counter sets hold nothing back.
    hostile = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": "h"},
               "spec": {"driver": "gpu.nvidia.com", "nodeName": "n1", "pool": {"name": "n1", "generation": 1},
                        "sharedCounters": [{"name": "s", "counters": {"c": {"value": "x"}}}, "junk"],
                        "devices": [{"name": "gpu-0", "attributes": {"type": {"string": "gpu"},
                                                                     "productName": {"string": "NVIDIA L4"}},
                                     "consumesCounters": [{"counterSet": "missing", "counters": {"c": {"value": "1"}}},
                                                          "junk"]}]}}
    read = read_slices([copy.deepcopy(hostile)], default_table())["n1"]
    assert read.counters == {("n1", "s"): {}} and read.devices[0].consumes[0][0] == "missing"
