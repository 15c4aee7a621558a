"""Discovery through the real pynvml binding over the fake NVML library, one machine per test."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import nvml_machines as machines
import pynvml
import pytest
from fake_nvml import FakeSystem, installed

from agent.document import build_document
from agent.nvml_discovery import NodeScan, NvmlUnavailable, mig_profile_name, scan
from agent.publisher import desired_labels
from policies.vocabulary.topology_schema import (
    LABEL_ACCELERATOR_TYPE,
    LABEL_NVLINK_CLIQUE,
    LABEL_NVLINK_DOMAIN_SIZE,
    TopologyDocument,
)

NOW = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)


def scan_of(system: FakeSystem) -> NodeScan:
    with installed(system):
        return scan()


def document_of(system: FakeSystem, labels: dict[str, str] | None = None) -> TopologyDocument:
    return build_document(scan_of(system), node_name="node-1", now=NOW, node_labels=labels)


def test_dgx_h100_is_one_eight_gpu_nvswitch_domain() -> None:
    doc = document_of(machines.dgx_h100())

    assert doc.accelerator_type == "nvidia-h100-80gb"
    assert doc.driver_version == "550.90.07"
    assert doc.cuda_driver_version == "12.4"
    assert [g.index for g in doc.gpus] == list(range(8))
    first = doc.gpus[0]
    assert first.name == "NVIDIA H100 80GB HBM3"
    assert first.product == "NVIDIA-H100-80GB-HBM3"
    assert first.memory_mib == 81559
    assert first.pci_bus_id == "00000000:18:00.0"
    assert first.compute_capability == "9.0"
    assert [g.numa_node for g in doc.gpus] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert len({g.uuid for g in doc.gpus}) == 8 and all(g.uuid.startswith("GPU-") for g in doc.gpus)
    assert all(g.healthy and not g.mig_enabled for g in doc.gpus)
    # All 18 links of every GPU go to NVSwitches: every pair is NV18.
    assert doc.nvlink.switched
    assert doc.nvlink.matrix == [[0 if i == j else 18 for j in range(8)] for i in range(8)]
    assert doc.nvlink.domain_size == 8 and doc.nvlink.domain == list(range(8))
    assert doc.fabric is None
    assert desired_labels(doc) == {LABEL_ACCELERATOR_TYPE: "nvidia-h100-80gb", LABEL_NVLINK_DOMAIN_SIZE: "8"}


def test_hgx_a100_mig_mixed_lists_instances_and_keeps_mig_gpus_out_of_the_domain() -> None:
    doc = document_of(machines.hgx_a100_80gb_mig_mixed())

    assert doc.accelerator_type == "nvidia-a100-80gb"
    gpu0, gpu1, gpu2 = doc.gpus[0], doc.gpus[1], doc.gpus[2]
    assert gpu0.mig_enabled and gpu1.mig_enabled and not gpu2.mig_enabled
    assert [m.profile for m in gpu0.mig_instances] == ["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"]
    assert [m.gpu_instance_id for m in gpu0.mig_instances] == [2, 3, 9, 10]
    assert [m.memory_mib for m in gpu0.mig_instances] == [40192, 19968, 9856, 9856]
    assert all(m.uuid and m.uuid.startswith("MIG-") for m in gpu0.mig_instances)
    assert [m.profile for m in gpu1.mig_instances] == ["1g.10gb"] * 7
    assert gpu2.mig_instances == []
    # 12 links, 2 into each of 6 NVSwitches: NV12 everywhere, but MIG GPUs cannot take a whole-GPU NVLink job.
    assert doc.nvlink.matrix[0][1] == 12 and doc.nvlink.matrix[2][7] == 12
    assert doc.nvlink.domain == [2, 3, 4, 5, 6, 7] and doc.nvlink.domain_size == 6


def test_h100_nvl_bridged_pairs_give_domain_size_two() -> None:
    doc = document_of(machines.h100_nvl_pairs())

    assert doc.accelerator_type == "nvidia-h100-94gb"
    assert doc.nvlink.matrix == [[0, 12, 0, 0], [12, 0, 0, 0], [0, 0, 0, 12], [0, 0, 12, 0]]
    assert not doc.nvlink.switched
    assert doc.nvlink.domain_size == 2 and doc.nvlink.domain == [0, 1]


def test_gb200_tray_publishes_its_clique_from_the_raw_cluster_uuid() -> None:
    doc = document_of(machines.gb200_nvl72_tray())

    assert doc.accelerator_type == "nvidia-gb200-186gb"
    assert doc.nvlink.domain_size == 4 and doc.nvlink.switched
    assert doc.fabric is not None
    # The UUID holds zero bytes; read as text it would stop at the first one.
    assert doc.fabric.cluster_uuid == "3183419e-00b2-4e7f-9f00-d895a9fb06be"
    assert doc.fabric.clique_id == 17044
    assert desired_labels(doc)[LABEL_NVLINK_CLIQUE] == "3183419e-00b2-4e7f-9f00-d895a9fb06be.17044"
    assert [g.pci_bus_id for g in doc.gpus][2] == "00000008:09:00.0"


def test_gb200_clique_through_the_unversioned_call_on_an_older_driver() -> None:
    system = machines.gb200_nvl72_tray()
    system.fabric_v = False
    with installed(system) as library:
        result = scan()
    assert library.calls["nvmlDeviceGetGpuFabricInfo"] == 4
    doc = build_document(result, node_name="n", now=NOW)
    assert doc.fabric is not None and doc.fabric.clique == f"{machines.GB200_CLUSTER}.{machines.GB200_CLIQUE}"


def test_gb200_gpus_in_different_cliques_give_no_clique() -> None:
    doc = document_of(machines.gb200_nvl72_tray(odd_gpu_clique=17045))
    assert doc.fabric is None
    assert LABEL_NVLINK_CLIQUE not in desired_labels(doc)


def test_h100_completed_with_zero_cluster_uuid_is_not_a_clique() -> None:
    doc = document_of(machines.hgx_h100_zero_cluster_uuid())
    assert doc.fabric is None
    assert LABEL_NVLINK_CLIQUE not in desired_labels(doc)
    assert doc.nvlink.domain_size == 8


def test_l4_with_mps_labels_and_exclusive_process_mode() -> None:
    doc = document_of(machines.l4_mps(), machines.L4_MPS_LABELS)

    assert doc.accelerator_type == "nvidia-l4-24gb"
    assert [g.compute_mode for g in doc.gpus] == ["exclusive-process", "exclusive-process"]
    assert doc.sharing.strategy == "mps" and doc.sharing.replicas == 4 and doc.sharing.source == "labels+nvml"
    # No NVLink: each GPU is a domain of one; no MIG, no fabric.
    assert doc.nvlink.matrix == [[0, 0], [0, 0]] and doc.nvlink.domain_size == 1 and not doc.nvlink.switched
    assert not any(g.mig_enabled for g in doc.gpus) and doc.fabric is None


def test_l4_mps_seen_by_nvml_alone() -> None:
    doc = document_of(machines.l4_mps())
    assert (doc.sharing.strategy, doc.sharing.replicas, doc.sharing.source) == ("mps", 1, "nvml")


def test_time_slicing_comes_from_labels_only() -> None:
    labels = {"nvidia.com/gpu.sharing-strategy": "time-slicing", "nvidia.com/gpu.replicas": "10"}
    doc = document_of(machines.dgx_h100(), labels)
    assert (doc.sharing.strategy, doc.sharing.replicas, doc.sharing.source) == ("time-slicing", 10, "labels")


def test_a_lost_gpu_is_reported_unhealthy_and_the_rest_still_published() -> None:
    doc = document_of(machines.dgx_h100_failing_gpu(index=3))

    lost = doc.gpus[3]
    assert not lost.healthy
    assert lost.error is not None and "GPU is lost" in lost.error
    assert all(g.healthy for i, g in enumerate(doc.gpus) if i != 3)
    # The lost GPU's type cannot be read, and it must not make the node "mixed".
    assert lost.accelerator_type == "unknown"
    assert doc.accelerator_type == "nvidia-h100-80gb"
    assert doc.nvlink.domain_size == 7 and 3 not in doc.nvlink.domain
    json.loads(doc.to_annotation())


@pytest.mark.parametrize(
    ("call", "code", "message"),
    [
        ("nvmlDeviceGetHandleByIndex_v2", pynvml.NVML_ERROR_GPU_IS_LOST, "nvmlDeviceGetHandleByIndex"),
        ("nvmlDeviceGetMemoryInfo", pynvml.NVML_ERROR_UNKNOWN, "nvmlDeviceGetMemoryInfo"),
        ("nvmlDeviceGetNvLinkState", pynvml.NVML_ERROR_GPU_IS_LOST, "nvmlDeviceGetNvLinkState"),
        ("nvmlDeviceGetGpuFabricInfoV", pynvml.NVML_ERROR_UNKNOWN, "nvmlDeviceGetGpuFabricInfoV"),
    ],
)
def test_one_failing_call_marks_that_gpu_unhealthy_with_the_call_named(call: str, code: int, message: str) -> None:
    doc = document_of(machines.dgx_h100_failing_gpu(index=5, call=call, code=code))
    failed = doc.gpus[5]
    assert not failed.healthy and failed.error is not None and failed.error.startswith(message)
    assert sum(not g.healthy for g in doc.gpus) == 1
    assert doc.nvlink.domain_size == 7


def test_a_gpu_that_fails_late_keeps_what_was_read() -> None:
    doc = document_of(machines.dgx_h100_failing_gpu(index=2, call="nvmlDeviceGetNvLinkState", code=15))
    failed = doc.gpus[2]
    assert failed.uuid.startswith("GPU-") and failed.accelerator_type == "nvidia-h100-80gb"
    assert failed.pci_bus_id == "00000000:3a:00.0"
    # Its peers still see their switch links; only eligibility drops it from the domain.
    assert doc.nvlink.matrix[0][2] == 0 and doc.nvlink.matrix[0][1] == 18


def test_node_without_nvml_library(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_library(name: str, *args: object, **kwargs: object) -> object:
        raise OSError(f"{name}: cannot open shared object file: No such file or directory")

    monkeypatch.setattr(pynvml, "nvmlLib", None)
    monkeypatch.setattr(pynvml, "CDLL", no_library)
    pynvml._nvmlGetFunctionPointer_cache.clear()
    with pytest.raises(NvmlUnavailable, match="NVML Shared Library Not Found"):
        scan()


def test_node_whose_driver_is_not_loaded() -> None:
    with installed(FakeSystem(gpus=[], init_error=pynvml.NVML_ERROR_DRIVER_NOT_LOADED)), pytest.raises(
        NvmlUnavailable, match="Driver Not Loaded"
    ):
        scan()


def test_scan_shuts_nvml_down_even_when_it_fails() -> None:
    system = machines.dgx_h100()
    with installed(system) as library:
        library.missing.add("nvmlDeviceGetCount_v2")
        with pytest.raises(pynvml.NVMLError):
            scan()
    assert library.calls["nvmlShutdown"] == 1


@pytest.mark.parametrize(
    ("gi", "ci", "memory_mib", "total_mib", "name"),
    [
        (1, 1, 9856, 81920, "1g.10gb"),
        (1, 1, 19968, 81920, "1g.20gb"),
        (3, 3, 40192, 81920, "3g.40gb"),
        (7, 7, 80896, 81920, "7g.80gb"),
        (1, 1, 4864, 40960, "1g.5gb"),
        (2, 1, 19968, 81920, "1c.2g.20gb"),
        (1, 1, 11008, 95830, "1g.12gb"),
        (7, 7, 95232, 95830, "7g.94gb"),
    ],
)
def test_mig_profile_names_match_the_device_plugin(
    gi: int, ci: int, memory_mib: int, total_mib: int, name: str
) -> None:
    assert mig_profile_name(gi, ci, memory_mib, total_mib * 1024 * 1024) == name


def test_a_gpu_failing_after_its_bus_id_still_shows_in_its_peers_links() -> None:
    system = machines.h100_nvl_pairs()
    system.gpus[1].failures["nvmlDeviceGetUUID"] = pynvml.NVML_ERROR_UNKNOWN
    doc = document_of(system)
    assert not doc.gpus[1].healthy and doc.gpus[1].pci_bus_id == "00000000:31:00.0"
    assert doc.nvlink.matrix[0][1] == 12
    assert doc.nvlink.domain == [2, 3]
