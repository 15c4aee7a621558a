"""Numbers on the page: a MIG or MPS profile priced as what a pod gets, NVLink 0 on fully MIG nodes."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient


def _by(items: list[dict[str, Any]], key: str, value: str) -> dict[str, Any]:
    return next(item for item in items if item[key] == value)


def test_profiles_are_priced_as_the_slice_or_share_a_pod_gets(client: TestClient) -> None:
    profiles = client.get("/api/v1/hardware-profiles").json()["profiles"]
    mig = _by(profiles, "name", "small-mig")
    assert mig["unit"] == "MIG 1g.10gb slice (1/7 GPU)"
    assert (mig["pricePerGPUHour"], mig["pricePerUnitHour"]) == ("2.80", "0.40")
    mps = _by(profiles, "name", "shared-l4")
    assert mps["unit"] == "MPS share (0.25 GPU)"
    assert float(mps["pricePerUnitHour"]) == float(mps["pricePerGPUHour"]) * 0.25
    whole = _by(profiles, "name", "premium-h100")
    assert whole["unit"] == "GPU" and whole["pricePerUnitHour"] == whole["pricePerGPUHour"]


def test_fully_mig_partitioned_nodes_have_no_nvlink_domain(client: TestClient) -> None:
    nodes = client.get("/api/v1/nodes").json()["nodes"]
    mig_node = _by(nodes, "name", "hgx-a100-mig-01")
    assert mig_node["mig"]["profiles"] and mig_node["nvlinkDomainSize"] == 0
    h100 = [n for n in nodes if n["acceleratorType"] == "nvidia-h100-80gb"]
    assert h100 and all(n["nvlinkDomainSize"] == 8 for n in h100)


def test_type_summary_counts_mig_slices_as_slices(client: TestClient) -> None:
    types = client.get("/api/v1/nodes").json()["types"]
    a100 = _by(types, "id", "nvidia-a100-80gb")
    assert a100["slices"]["1g.10gb"] == {"available": 27, "total": 28}
    assert all(float(c["available"]).is_integer() for c in a100["slices"].values())
    l4 = _by(types, "id", "nvidia-l4-24gb")  # MPS replicas folded back into physical GPUs
    assert l4["wholeGpus"] <= l4["gpus"]


def test_nodes_count_their_gpu_pods(client: TestClient) -> None:
    nodes = client.get("/api/v1/nodes").json()["nodes"]
    assert sum(n["pods"] for n in nodes) >= 2  # the example cluster's running GPU pods
    assert all(n["pods"] == 0 for n in nodes if not n["used"])
