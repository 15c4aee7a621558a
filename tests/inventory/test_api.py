"""The read-only JSON API (docs/api.md) over the example cluster, through a real FastAPI app."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
import yaml
from cluster_dirs import EXAMPLE_CONFIG, copy_example_cluster, edit_manifests, gpu_pod, plant
from fastapi import FastAPI
from fastapi.testclient import TestClient
from patience import WAIT_SECONDS

from webhook.assembly import build_runtime
from webhook.config import load_config
from webhook.inventory.cache import InventoryCache
from webhook.runtime import Runtime
from webhook.server.api_routes import api_router


def api_app(runtime: Runtime, cache: InventoryCache | None = None) -> FastAPI:
    app = FastAPI()
    app.include_router(api_router(runtime, cache))
    return app


def _by(items: list[dict[str, Any]], key: str, value: str) -> dict[str, Any]:
    matches = [item for item in items if item[key] == value]
    assert len(matches) == 1, f"{key}={value!r}: {len(matches)} matches"
    return matches[0]


def _runtime_for(directory: Path) -> Runtime:
    return build_runtime(load_config(EXAMPLE_CONFIG), directory)


# -- /api/v1/hardware-profiles ------------------------------------------------------------------


def test_hardware_profiles_fields_and_availability(client: TestClient) -> None:
    response = client.get("/api/v1/hardware-profiles")
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    body = response.json()
    assert body["currency"] == "USD"
    assert body["generatedAt"].endswith("Z")
    assert [p["name"] for p in body["profiles"]] == [
        "nvl72", "premium-h100", "shared-l4", "small-mig", "workbench-h100",
    ]

    premium = _by(body["profiles"], "name", "premium-h100")
    assert premium["displayName"] == "Premium H100 80GB"
    assert premium["sharing"] == {"mode": "exclusive"}
    assert premium["pricePerGPUHour"] == "4.50"
    # Each DGX runs a 4-GPU pod (train-llm-0, inference/vllm-70b-0); the finished 8-GPU pod on dgx-h100-02
    # holds nothing; ml-research/waiting, unbound, asks for 8 (examples/cluster/pods-waiting.yaml).
    assert (premium["total"], premium["available"], premium["pending"]) == (16, 8, 8)
    assert premium["acceleratorTypes"] == [{
        "id": "nvidia-h100-80gb", "productName": "NVIDIA H100 80GB", "memoryGB": 80, "architecture": "hopper",
        "total": 16, "available": 8, "pending": 8, "pricePerGPUHour": "4.50", "pricePerUnitHour": "4.50",
    }]
    assert premium["summary"] == "Premium H100 80GB (NVIDIA H100 80GB) - 8 available"


def test_mig_profile_counts_slices_of_its_profile(client: TestClient) -> None:
    small = _by(client.get("/api/v1/hardware-profiles").json()["profiles"], "name", "small-mig")
    assert small["sharing"] == {"mode": "mig", "migProfile": "1g.10gb"}
    # 16 + 12 slices of 1g.10gb on the two A100 nodes; notebook-1 holds one.
    assert (small["total"], small["available"]) == (28, 27)
    assert small["pricePerGPUHour"] == "2.80"  # no profile price: the configured price of its first type


def test_shared_profile_counts_physical_gpus_on_shared_nodes(client: TestClient) -> None:
    shared = _by(client.get("/api/v1/hardware-profiles").json()["profiles"], "name", "shared-l4")
    assert shared["sharing"] == {"mode": "mps", "gpuFraction": 0.25}
    assert (shared["total"], shared["available"]) == (4, 4)
    nvl72 = _by(client.get("/api/v1/hardware-profiles").json()["profiles"], "name", "nvl72")
    assert nvl72["pricePerGPUHour"] == "9.00"


def test_pending_pods_cordoned_nodes_and_finished_pods(tmp_path: Path) -> None:
    cluster = copy_example_cluster(tmp_path / "cluster")
    plant(
        cluster, "extra.yaml",
        # Unbound, admitted for H100: pending on the type.
        gpu_pod("queued", "team-a", gpus=2, annotations={"kgwe.io/accelerator-type": "nvidia-h100-80gb"},
                phase="Pending"),
        # Finished pods hold nothing, bound or not.
        gpu_pod("done", "team-a", gpus=8, node="dgx-h100-02", phase="Failed"),
        # MIG slices taken on the second A100 node.
        gpu_pod("nb-2", "inference", gpus=3, node="hgx-a100-mig-02", resource="nvidia.com/mig-1g.10gb"),
    )

    def cordon_first_tray(documents: list[dict[str, Any]]) -> None:
        documents[0]["spec"]["unschedulable"] = True

    edit_manifests(cluster / "nodes-gb200.yaml", cordon_first_tray)

    with TestClient(api_app(_runtime_for(cluster))) as client:
        profiles = client.get("/api/v1/hardware-profiles").json()["profiles"]
    premium = _by(profiles, "name", "premium-h100")
    assert (premium["total"], premium["available"], premium["pending"]) == (16, 8, 8 + 2)  # the example's waiting too
    small = _by(profiles, "name", "small-mig")
    assert (small["total"], small["available"]) == (28, 24)
    nvl72 = _by(profiles, "name", "nvl72")
    # One of four trays cordoned (the one running rl-rollout-0); eval-0 holds 2 GPUs of rack B.
    assert (nvl72["total"], nvl72["available"]) == (12, 10)


# -- /api/v1/nodes --------------------------------------------------------------------------------


def test_nodes_view(client: TestClient) -> None:
    body = client.get("/api/v1/nodes").json()
    nodes = body["nodes"]
    assert [n["name"] for n in nodes] == sorted(n["name"] for n in nodes)

    dgx = _by(nodes, "name", "dgx-h100-01")
    assert dgx["acceleratorType"] == "nvidia-h100-80gb"
    assert dgx["productName"] == "NVIDIA H100 80GB"
    assert dgx["typeSource"] == "agent-label"
    assert (dgx["gpus"], dgx["memoryMiB"], dgx["architecture"]) == (8, 81559, "hopper")
    assert dgx["allocatable"] == {"nvidia.com/gpu": 8}
    assert dgx["used"] == {"nvidia.com/gpu": 4}
    assert dgx["nvlinkDomainSize"] == 8
    assert dgx["taints"] == [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]
    assert dgx["topology"] == {"present": False, "ageSeconds": None, "stale": False}
    assert dgx["sharing"] == {"strategy": "none", "replicas": 1}
    # Only kgwe.io/, nvidia.com/ and topology labels; no annotations, no addresses.
    assert all(k.startswith(("kgwe.io/", "nvidia.com/", "topology.kubernetes.io/")) for k in dgx["labels"])
    assert dgx["labels"]["kgwe.io/accelerator-type"] == "nvidia-h100-80gb"
    assert "annotations" not in dgx and "addresses" not in dgx

    # Its 8-GPU pod has finished; inference/vllm-70b-0 runs on 4.
    assert _by(nodes, "name", "dgx-h100-02")["used"] == {"nvidia.com/gpu": 4}
    unknown = _by(nodes, "name", "gpu-unlabelled-01")
    assert (unknown["acceleratorType"], unknown["productName"], unknown["gpus"]) == ("unknown", None, 2)
    cpu = _by(nodes, "name", "cpu-01")
    assert (cpu["acceleratorType"], cpu["gpus"], cpu["allocatable"]) == (None, 0, {})
    mig = _by(nodes, "name", "hgx-a100-mig-01")
    assert mig["mig"] == {"strategy": "mixed", "ready": True, "profiles": {"1g.10gb": 16, "2g.20gb": 8, "3g.40gb": 8}}
    assert mig["used"] == {"nvidia.com/mig-1g.10gb": 1}
    l4 = _by(nodes, "name", "l4-mps-01")
    assert l4["sharing"] == {"strategy": "mps", "replicas": 4}
    gb200 = _by(nodes, "name", "gb200-racka-tray1")
    assert gb200["clique"] == "3183419e-4ab2-4e7f-9f2d-d895a9fb06be.17044"

    types = body["types"]
    h100 = _by(types, "id", "nvidia-h100-80gb")
    assert (h100["nodes"], h100["gpus"], h100["available"]) == (2, 16, 8)
    assert _by(types, "id", "unknown")["productName"] is None
    assert types[-1]["id"] == "unknown"  # untyped GPUs listed last


# -- /api/v1/tenants ------------------------------------------------------------------------------


def test_tenants_view(client: TestClient) -> None:
    body = client.get("/api/v1/tenants").json()
    assert body["currency"] == "USD"
    team_a = _by(body["tenants"], "tenant", "team-a")
    assert team_a["quotas"] == ["team-a"]
    assert team_a["namespaces"] == ["team-a"]
    assert team_a["hourlyCost"] == "18.00"
    assert team_a["pods"] == 1
    h100 = _by(team_a["limits"], "name", "nvidia-h100-80gb")
    assert h100 == {"kind": "acceleratorType", "name": "nvidia-h100-80gb", "quota": "team-a", "gpus": 8, "used": 4,
                    "gpuMemory": None, "usedMemory": None}
    research = _by(body["tenants"], "tenant", "ml-research")
    assert research["groups"] == ["ml-researchers"]
    profile = _by(research["limits"], "name", "premium-h100")
    assert (profile["kind"], profile["gpus"], profile["gpuMemory"], profile["usedMemory"]) == (
        "profile", 12, "960Gi", "0Gi")
    # A tenant without a TenantQuota still shows its running pods' cost: notebook-1's computed 1/7 of an A100 at
    # 2.80 (0.40) and vllm-70b-0's stated 18.
    inference = _by(body["tenants"], "tenant", "inference")
    assert (inference["quotas"], inference["limits"], inference["hourlyCost"], inference["pods"]) == (
        [], [], "18.40", 2)


# -- proposal -------------------------------------------------------------------------------------


def test_proposal_from_node_names(client: TestClient) -> None:
    response = client.get("/api/v1/hardware-profiles/proposal", params={"nodes": "dgx-h100-01,dgx-h100-02"})
    assert response.status_code == 200
    body = response.json()
    assert yaml.safe_load(body["yaml"]) == body["object"]
    obj = body["object"]
    assert (obj["apiVersion"], obj["kind"]) == ("kgwe.io/v1alpha1", "HardwareProfile")
    spec = obj["spec"]
    assert spec["acceleratorTypes"] == ["nvidia-h100-80gb"]
    assert spec["sharing"] == {"mode": "exclusive"}
    assert spec["nodeSelector"] == {"kgwe.io/accelerator-type": "nvidia-h100-80gb"}
    assert spec["pricePerGPUHour"] == "4.50"
    assert "tolerations" not in spec  # the GPU taint is tolerated by admission for every GPU pod
    assert body["nodes"] == ["dgx-h100-01", "dgx-h100-02"]


def test_proposal_by_type_and_by_label_selector(client: TestClient) -> None:
    mig = client.get("/api/v1/hardware-profiles/proposal", params={"type": "nvidia-a100-80gb"}).json()["object"]
    assert mig["spec"]["sharing"] == {"mode": "mig", "migProfile": "1g.10gb"}  # on every node, most slices
    assert mig["metadata"]["name"] == "nvidia-a100-80gb-mig-1g-10gb"
    mps = client.get("/api/v1/hardware-profiles/proposal",
                     params={"nodes": "nvidia.com/gpu.sharing-strategy=mps", "name": "l4-quarter"}).json()["object"]
    assert mps["metadata"]["name"] == "l4-quarter"
    assert mps["spec"]["sharing"] == {"mode": "mps", "gpuFraction": 0.25}
    assert mps["spec"]["acceleratorTypes"] == ["nvidia-l4-24gb"]
    assert mps["spec"]["nodeSelector"]["nvidia.com/gpu.sharing-strategy"] == "mps"


def test_proposal_errors(client: TestClient) -> None:
    assert client.get("/api/v1/hardware-profiles/proposal").status_code == 400
    missing = client.get("/api/v1/hardware-profiles/proposal", params={"nodes": "no-such-node"})
    assert missing.status_code == 404
    assert "no-such-node" in missing.json()["error"]
    cpu = client.get("/api/v1/hardware-profiles/proposal", params={"nodes": "cpu-01,gpu-unlabelled-01"})
    assert cpu.status_code == 400
    bad = client.get("/api/v1/hardware-profiles/proposal", params={"nodes": "a in (b"})
    assert bad.status_code == 400


# -- caching and concurrency ----------------------------------------------------------------------


def test_concurrent_callers_get_identical_bytes(example_runtime: Runtime) -> None:
    app = api_app(example_runtime)

    async def fetch_all() -> list[bytes]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://kgwe.test") as http:
            responses = await asyncio.gather(*(http.get("/api/v1/hardware-profiles") for _ in range(100)))
        assert all(r.status_code == 200 for r in responses)
        return [r.content for r in responses]

    bodies = asyncio.run(fetch_all())
    assert len(set(bodies)) == 1


def test_a_new_snapshot_is_served_after_the_refresh_interval(tmp_path: Path) -> None:
    from webhook.inventory.profiles import hardware_profiles_view

    runtime = _runtime_for(copy_example_cluster(tmp_path / "cluster"))
    runtime.store.min_rebuild_interval = 0
    cache = InventoryCache(
        runtime.store.snapshot, lambda: runtime.config, refresh_seconds=0, build_share=0, background=False
    )
    with TestClient(api_app(runtime, cache)) as client:
        before = _by(client.get("/api/v1/hardware-profiles").json()["profiles"], "name", "premium-h100")
        runtime.store.upsert(gpu_pod("late", "team-a", gpus=3, node="dgx-h100-02"))
        after = _by(client.get("/api/v1/hardware-profiles").json()["profiles"], "name", "premium-h100")
    assert (before["available"], after["available"]) == (8, 5)  # 3 of dgx-h100-02's 4 free GPUs taken
    assert cache.view("profiles", hardware_profiles_view)["profiles"]  # the same cache serves Python callers


def test_background_refresh_serves_the_previous_answer_until_the_new_one_is_ready(tmp_path: Path) -> None:
    import time

    from webhook.inventory.profiles import hardware_profiles_view

    runtime = _runtime_for(copy_example_cluster(tmp_path / "cluster"))
    runtime.store.min_rebuild_interval = 0
    cache = InventoryCache(runtime.store.snapshot, lambda: runtime.config, refresh_seconds=0, background=True)

    def premium() -> Any:
        return _by(cache.view("profiles", hardware_profiles_view)["profiles"], "name", "premium-h100")["available"]

    assert premium() == 8
    runtime.store.upsert(gpu_pod("late", "team-a", gpus=3, node="dgx-h100-02"))
    seen = [premium()]
    deadline = time.monotonic() + WAIT_SECONDS
    while seen[-1] != 5 and time.monotonic() < deadline:
        time.sleep(0.01)
        seen.append(premium())
    assert seen[-1] == 5
    assert set(seen) <= {8, 5}  # never anything but a whole old or a whole new answer
