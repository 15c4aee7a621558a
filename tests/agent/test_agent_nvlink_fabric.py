"""The pure parts: peer matrix, largest all-to-all set, fabric clique validation, sharing rules."""

from __future__ import annotations

import uuid

import pynvml
from fake_nvml import FakeFabric, installed
from nvml_machines import gb200_nvl72_tray

from agent.fabric import FABRIC_INFO_V2, FabricInfo, node_clique, read_fabric_info
from agent.nvlink import REMOTE_GPU, REMOTE_SWITCH, NvLinkPort, largest_all_to_all, normalise_bus_id, peer_matrix
from agent.sharing import sharing_state

CLUSTER = uuid.UUID("7b968a6d-c8aa-45e1-9e07-e1e51be99c31").bytes


def bridge(link: int, bus: str) -> NvLinkPort:
    return NvLinkPort(link, bus, REMOTE_GPU)


def test_bus_ids_compare_in_both_domain_widths() -> None:
    assert normalise_bus_id("0000:18:00.0") == normalise_bus_id("00000000:18:00.0") == "00000000:18:00.0"


def test_direct_links_counted_by_remote_bus_id_from_either_end() -> None:
    buses = ["0000:01:00.0", "0000:02:00.0", "0000:03:00.0"]
    links = [
        [bridge(0, "00000000:02:00.0"), bridge(1, "00000000:02:00.0"), bridge(2, "00000000:03:00.0")],
        [bridge(0, "00000000:01:00.0"), bridge(1, "00000000:01:00.0")],
        [],  # its link queries failed: GPU 0's view still shows the link
    ]
    matrix, switched = peer_matrix(buses, links)
    assert matrix == [[0, 2, 1], [2, 0, 0], [1, 0, 0]]
    assert not switched
    assert largest_all_to_all(matrix) == [0, 1]


def test_switched_pairs_take_the_narrower_side() -> None:
    switch = "00000000:05:00.0"
    links = [[NvLinkPort(i, switch, REMOTE_SWITCH) for i in range(n)] for n in (18, 12, 0)]
    matrix, switched = peer_matrix(["0:1:0.0", "0:2:0.0", "0:3:0.0"], links)
    assert switched
    assert matrix == [[0, 12, 0], [12, 0, 0], [0, 0, 0]]


def test_largest_all_to_all_is_a_maximum_clique() -> None:
    # A 4-cycle with one chord (0-2): triangles {0,1,2} and {0,2,3}; 1 and 3 are not linked.
    matrix = [
        [0, 1, 1, 1],
        [1, 0, 1, 0],
        [1, 1, 0, 1],
        [1, 0, 1, 0],
    ]
    assert largest_all_to_all(matrix) == [0, 1, 2]
    assert largest_all_to_all(matrix, [True, False, True, True]) == [0, 2, 3]
    assert largest_all_to_all([[0, 0], [0, 0]]) == [0]
    assert largest_all_to_all([[0]], [False]) == []
    assert largest_all_to_all([]) == []


def test_clique_requires_completed_success_and_a_non_zero_uuid() -> None:
    good = FabricInfo(CLUSTER, 5, state=3, status=0)
    assert node_clique([good, good]) is not None
    assert node_clique([good, FabricInfo(CLUSTER, 5, state=2, status=0)]) is None  # still in progress
    assert node_clique([good, FabricInfo(CLUSTER, 5, state=3, status=pynvml.NVML_ERROR_UNKNOWN)]) is None
    assert node_clique([FabricInfo(bytes(16), 0, state=3, status=0)]) is None
    assert node_clique([good, FabricInfo(CLUSTER, 6, state=3, status=0)]) is None  # another clique id
    assert node_clique([good, None]) is None  # a GPU without fabric support
    assert node_clique([]) is None
    fabric = node_clique([good])
    assert fabric is not None and fabric.clique == "7b968a6d-c8aa-45e1-9e07-e1e51be99c31.5"


def test_fabric_struct_is_read_from_the_c_layout() -> None:
    assert pynvml.nvmlGpuFabricInfo_v2 == FABRIC_INFO_V2
    system = gb200_nvl72_tray()
    system.gpus[0].fabric = FakeFabric(cluster_uuid=b"\x00" * 15 + b"\x01", clique_id=2**32 - 1, health_mask=7)
    with installed(system):
        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        info = read_fabric_info(pynvml, handle)
        pynvml.nvmlShutdown()
    assert info is not None and info.attached
    assert info.cluster_uuid == b"\x00" * 15 + b"\x01"
    assert info.clique_id == 2**32 - 1
    assert info.cluster_uuid_text == "00000000-0000-0000-0000-000000000001"


def test_sharing_rules() -> None:
    exclusive = ["exclusive-process", "exclusive-process"]
    assert sharing_state(["default"], {}).strategy == "none"
    assert sharing_state(exclusive, {}).source == "nvml"
    labelled = sharing_state(["default"], {"nvidia.com/gpu.sharing-strategy": "mps", "nvidia.com/gpu.replicas": "3"})
    assert (labelled.strategy, labelled.replicas, labelled.source) == ("mps", 3, "labels")
    # replicas 1 means the device plugin shares nothing, whatever the strategy label says.
    assert sharing_state([], {"nvidia.com/gpu.sharing-strategy": "time-slicing"}).strategy == "none"
    assert sharing_state(exclusive, {"nvidia.com/gpu.replicas": "many"}).replicas == 1
