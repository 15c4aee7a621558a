"""YAML mode: the GPUs a quota refusal counts are the GPUs /api/v1/tenants shows, reservations included."""

from __future__ import annotations

from pathlib import Path

from cluster_dirs import EXAMPLE_CONFIG, copy_example_cluster, gpu_pod
from fastapi import FastAPI
from fastapi.testclient import TestClient

from webhook.config import load_config
from webhook.review import review_pod
from webhook.runtime import build_runtime
from webhook.server.api_routes import api_router


def _h100_row(client: TestClient, tenant: str) -> dict:
    tenants = client.get("/api/v1/tenants").json()["tenants"]
    entry = next(t for t in tenants if t["tenant"] == tenant)
    return next(r for r in entry["limits"] if r["name"] == "nvidia-h100-80gb")


def test_reviewed_pods_reservations_are_shown_and_named_in_the_refusal(tmp_path: Path) -> None:
    cluster = copy_example_cluster(tmp_path / "cluster")
    runtime = build_runtime(load_config(EXAMPLE_CONFIG), cluster)
    app = FastAPI()
    app.include_router(api_router(runtime))
    with TestClient(app) as client:
        before = _h100_row(client, "team-a")
        assert before.get("reserved", 0) == 0
        limit, used = before["gpus"], before["used"]
        free = int(limit - used)
        assert free >= 2, before
        pod = gpu_pod("exp-1", "team-a", gpus=free, annotations={"kgwe.io/accelerator": "nvidia-h100-80gb"})
        assert review_pod(runtime.admission, pod).allowed
        after = _h100_row(client, "team-a")
        assert (after["used"], after["reserved"]) == (used, free)  # shown where the use is shown
        again = gpu_pod("exp-2", "team-a", gpus=1, annotations={"kgwe.io/accelerator": "nvidia-h100-80gb"})
        refused = review_pod(runtime.admission, again)
    assert not refused.allowed
    assert f"{limit} of {limit} GPUs in use" in refused.message
    assert f"{free} of these GPUs are reserved for 1 pod admitted in the last 60 s" in refused.message
