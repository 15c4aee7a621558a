"""The Workloads page in a real headless Chromium against `kgwe serve`, and `/api/v1/workloads` behind it:
GPU workloads with their templates, total demand, gang, and whether KGWE would admit each now."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cluster_dirs import copy_example_cluster, plant
from ui_harness import KgweServer, kgwe_serve, open_page

pytestmark = pytest.mark.timeout(300)


def job(name: str, namespace: str, gpus: str, parallelism: int, **annotations: str) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "parallelism": parallelism,
            "completions": parallelism,
            "template": {
                "metadata": {"annotations": annotations},
                "spec": {"restartPolicy": "Never", "containers": [
                    {"name": "c", "image": "busybox", "resources": {"limits": {"nvidia.com/gpu": gpus}}}]},
            },
        },
    }


@pytest.fixture(scope="module")
def workloads_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KgweServer]:
    workdir = tmp_path_factory.mktemp("workloads")
    cluster = copy_example_cluster(workdir / "cluster")
    plant(cluster, "zz-workloads.yaml",
          job("too-big", "ml-research", "16", 2, **{"kgwe.io/accelerator": "nvidia-h100-80gb"}),
          {**job("cpu-only", "ml-research", "0", 1), "spec": {"template": {"spec": {"containers": [
              {"name": "c", "image": "busybox"}]}}}})
    with kgwe_serve(workdir, cluster) as running:
        yield running


def _api(server: KgweServer) -> Any:
    with server.api() as client:
        response = client.get("/api/v1/workloads")
        assert response.status_code == 200
        return response.json()


def test_the_api_lists_gpu_workloads_with_their_verdicts(workloads_server: KgweServer) -> None:
    body = _api(workloads_server)
    by_name = {w["name"]: w for w in body["workloads"]}
    # The example's two Deployments and the Job planted here; the CPU-only Job is not a GPU workload.
    assert set(by_name) == {"llm-serving", "chat-h200", "too-big"}
    serving = by_name["llm-serving"]
    assert (serving["kind"], serving["namespace"], serving["admitted"], serving["reason"]) == (
        "Deployment", "team-a", True, "")
    assert serving["templates"] == [{"path": "spec.template", "pods": 2, "gpusPerPod": 1, "other": {}}]
    assert serving["totalGpus"] == 2
    big = by_name["too-big"]
    assert (big["kind"], big["totalGpus"], big["admitted"]) == ("Job", 32, False)
    assert big["reason"].startswith("spec.template: ") and "16" in big["reason"]
    assert not by_name["chat-h200"]["admitted"]  # examples/cluster/workloads.yaml: no node has H200s
    assert body["refused"] == 2


def test_the_workloads_page_shows_what_the_api_answers(browser: Any, workloads_server: KgweServer) -> None:
    context, page, problems = open_page(browser, workloads_server)
    page.set_default_timeout(10_000)
    try:
        page.goto(f"{workloads_server.url}/ui/#/workloads")
        page.wait_for_selector("#workloads")
        if shots := os.environ.get("KGWE_UI_SHOTS"):
            page.screenshot(path=str(Path(shots) / "workloads.png"), full_page=True)
        rows = page.locator("#workloads tbody tr")
        body = _api(workloads_server)
        assert rows.count() == len(body["workloads"])
        refused = page.locator('tr[data-workload="Job/ml-research/too-big"]')
        reason = next(w["reason"] for w in body["workloads"] if w["name"] == "too-big")
        assert refused.locator("[data-field=reason]").inner_text() == reason
        assert "refused" in refused.inner_text()
        admitted = page.locator('tr[data-workload="Deployment/team-a/llm-serving"]')
        assert "spec.template 2 pods \u00d7 1 GPU" in admitted.inner_text()
    finally:
        context.close()
    assert problems.foreign_requests == []
