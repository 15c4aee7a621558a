"""A profile with nothing free is shown, not hidden, with what is waiting for it: the example cluster plus
training pods that fill every GB200 GPU and two gang members still waiting to be scheduled."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from ui_harness import EXAMPLE_CLUSTER, KgweServer, kgwe_serve, open_page

pytestmark = pytest.mark.timeout(300)

GB200 = "nvidia-gb200-186gb"
GB200_NODES = ["gb200-racka-tray1", "gb200-racka-tray2", "gb200-rackb-tray1", "gb200-rackb-tray2"]


def training_pod(name: str, node: str | None, phase: str) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "containers": [{"name": "trainer", "image": "nvcr.io/nvidia/pytorch:24.05-py3",
                        "resources": {"limits": {"nvidia.com/gpu": "4"}}}],
    }
    if node is not None:
        spec["nodeName"] = node
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "ml-research",
                     "annotations": {"kgwe.io/accelerator-type": GB200, "kgwe.io/tenant": "ml-research",
                                     "kgwe.io/profile": "nvl72"}},
        "spec": spec,
        "status": {"phase": phase},
    }


@pytest.fixture(scope="module")
def busy_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KgweServer]:
    workdir = tmp_path_factory.mktemp("busy-cluster")
    cluster = workdir / "cluster"
    shutil.copytree(EXAMPLE_CLUSTER, cluster)
    pods = [training_pod(f"llm-{i}", node, "Running") for i, node in enumerate(GB200_NODES)]
    pods += [training_pod(f"llm-waiting-{i}", None, "Pending") for i in range(2)]
    (cluster / "pods-gb200-busy.yaml").write_text(yaml.safe_dump_all(pods))
    with kgwe_serve(workdir, cluster) as running:
        yield running


def test_profile_with_none_available_is_shown_with_its_pending_gpus(browser: Any, busy_server: KgweServer) -> None:
    api = {p["name"]: p for p in busy_server.get_json("/api/v1/hardware-profiles")["profiles"]}
    nvl72 = api["nvl72"]
    assert nvl72["available"] == 0 and nvl72["pending"] > 0, "the cluster fixture should leave nvl72 full"

    context, page, problems = open_page(browser, busy_server)
    try:
        page.goto(f"{busy_server.url}/ui/#/profiles")
        page.wait_for_selector("article.profile")
        assert page.locator("article.profile").count() == len(api)
        card = page.locator('article.profile[data-profile="nvl72"]')
        assert "none-available" in (card.get_attribute("class") or "")
        assert card.locator(".badge").inner_text() == "none available now"
        assert card.locator('dd [data-field="available"]').inner_text() == "0"
        assert card.locator('dd [data-field="pending"]').inner_text() == str(nvl72["pending"])
        assert "waiting to be scheduled" in card.locator("dd.pending").inner_text()
        assert card.locator(f'tr[data-type="{GB200}"] [data-field="pending"]').inner_text() == str(
            nvl72["acceleratorTypes"][0]["pending"])
        # Profiles with GPUs free are not marked.
        full = sum(1 for p in api.values() if not p["available"])
        assert page.locator("article.profile.none-available").count() == full

        page.goto(f"{busy_server.url}/ui/#/nodes")
        page.wait_for_selector("#node-table tr.node")
        free = page.locator(f'tr.group[data-group="{GB200}"] [data-kind="free"]')
        assert free.count() == 0  # nothing free on the type: the Free cell says so with a dash
    finally:
        context.close()
    assert problems.errors == [] and problems.foreign_requests == []


def test_tenants_show_the_pods_that_wait_for_quota_and_why(browser: Any, tmp_path: Any) -> None:
    # team-a may use 8 H100s; train-llm-0 holds 4, `held` 4 more: `waits` (gated by kgwe.io/quota) is 1st in line.
    cluster = tmp_path / "cluster"
    shutil.copytree(EXAMPLE_CLUSTER, cluster)

    def team_a_pod(name: str, gated: bool) -> dict[str, Any]:
        return {"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": name, "namespace": "team-a", "creationTimestamp": "2026-11-29T00:00:00Z",
                             "annotations": {"kgwe.io/accelerator-type": "nvidia-h100-80gb",
                                             "kgwe.io/tenant": "team-a"}},
                "spec": {"schedulingGates": [{"name": "kgwe.io/quota"}] if gated else [],
                         "containers": [{"name": "main", "image": "cuda",
                                         "resources": {"limits": {"nvidia.com/gpu": "4"}}}]},
                "status": {"phase": "Pending"}}

    (cluster / "pods-quota.yaml").write_text(yaml.safe_dump_all([team_a_pod("held", False), team_a_pod("waits", True)]))
    with kgwe_serve(tmp_path, cluster) as server:
        api = {t["tenant"]: t for t in server.get_json("/api/v1/tenants")["tenants"]}
        assert api["team-a"]["waiting"]["pods"] == 1
        context, page, problems = open_page(browser, server)
        try:
            page.goto(f"{server.url}/ui/#/tenants")
            page.wait_for_selector("article.tenant")
            card = page.locator('article.tenant[data-tenant="team-a"]')
            assert card.locator('[data-field="waitingPods"]').inner_text() == "1"
            row = card.locator('li[data-pod="team-a/waits"]')
            assert "team-a: nvidia-h100-80gb 8 of 8 GPUs in use; this pod asks 4; 1st in line" in row.inner_text()
            # The example's own: ml-research/sweep-0 waits for GB200 quota (examples/cluster/pods-waiting.yaml).
            research = page.locator('article.tenant[data-tenant="ml-research"]')
            assert research.locator('[data-field="waitingPods"]').inner_text() == "1"
            assert "14 of 16 GPUs in use" in research.locator('li[data-pod="ml-research/sweep-0"]').inner_text()
            # A tenant with nothing waiting shows no list.
            assert page.locator('article.tenant[data-tenant="inference"] [data-field="waiting"]').count() == 0
        finally:
            context.close()
    assert problems.errors == [] and problems.foreign_requests == []
