"""Small things of the first hour: `GET /api/v1/` lists the read API, a tenant with only a pending pod is a
tenant, and the page writes "1 GPU", not "1 GPUs"."""

from __future__ import annotations

import re
from pathlib import Path

from cluster_dirs import EXAMPLE_CLUSTER, EXAMPLE_CONFIG, ROOT, copy_example_cluster, gpu_pod, plant
from fastapi.testclient import TestClient

from webhook.config import load_config
from webhook.inventory.capacity import Inventory
from webhook.inventory.tenants import tenants_view
from webhook.runtime import build_runtime


def test_the_api_prefix_lists_every_read_endpoint() -> None:
    from webhook.server.api_routes import api_router
    from webhook.server.app import create_app
    from webhook.server.explain_routes import explain_router
    from webhook.server.gang_routes import gangs_router
    from webhook.server.workloads_routes import workloads_router

    runtime = build_runtime(load_config(EXAMPLE_CONFIG), EXAMPLE_CLUSTER)
    app = create_app(runtime, extra_routers=[api_router(runtime), gangs_router(runtime), explain_router(runtime),
                                             workloads_router(runtime)])
    with TestClient(app) as client:
        for prefix in ("/api/v1/", "/api/v1"):
            answer = client.get(prefix, follow_redirects=False)
            assert answer.status_code == 200 and answer.headers["content-type"] == "application/json"
        endpoints = {e["path"]: e["description"] for e in client.get("/api/v1/").json()["endpoints"]}
        assert set(endpoints) >= {
            "/api/v1/hardware-profiles", "/api/v1/hardware-profiles/proposal", "/api/v1/nodes", "/api/v1/tenants",
            "/api/v1/costs", "/api/v1/gangs", "/api/v1/workloads", "/api/v1/explain",
        }
        assert all(endpoints.values()), "every endpoint says what it answers"
        for path in endpoints:  # each listed path is served (the proposal wants a query: 400, not 404)
            assert client.get(path).status_code in (200, 400), path


def test_a_tenant_with_only_a_pending_pod_and_no_quota_is_listed(tmp_path: Path) -> None:
    cluster = copy_example_cluster(tmp_path / "cluster")
    plant(cluster, "newcomer.yaml",
          {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "newcomers"}},
          gpu_pod("first-job", "newcomers", annotations={"kgwe.io/accelerator-type": "nvidia-h100-80gb"},
                  phase="Pending"))
    runtime = build_runtime(load_config(EXAMPLE_CONFIG), cluster)
    view = tenants_view(Inventory(runtime.store.snapshot(), runtime.config))
    tenant = next(t for t in view["tenants"] if "newcomers" in t["namespaces"])
    assert (tenant["pods"], tenant["pendingPods"], tenant["quotas"], tenant["limits"]) == (0, 1, [], [])
    assert tenant["hourlyCost"] == "0.00"
    # Scoped to readers of other namespaces it is not shown.
    scoped = tenants_view(Inventory(runtime.store.snapshot(), runtime.config), visible=lambda n: n != "newcomers")
    assert all("newcomers" not in t["namespaces"] for t in scoped["tenants"])


def test_the_page_counts_gpus_in_the_singular_when_there_is_one() -> None:
    script = (ROOT / "webhook" / "ui" / "app.js").read_text()
    # No count followed by a fixed "GPUs" or "GPU" word: every such count goes through plural() or a ternary.
    assert not re.search(r"\$\{[^}]*\} (whole )?GPUs", script)
    assert not re.search(r"\u00d7 \$\{[^}]*\} GPU", script)
    assert "plural(t.gpusPerPod, \"GPU\")" in script
