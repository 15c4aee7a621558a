"""The MIG plan page (SPEC section 11, docs/mig.md) in a real headless Chromium against `kgwe serve`: per
MIGStrategy and node, the layout now and the one planned, the action, why, and whether it would be applied,
as `GET /api/v1/mig-plan` gives them. The cluster is tests/migplan/cluster (a node to change, one busy, one
already right, one under the single strategy) plus a strategy in mode apply that takes one node first."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cluster_dirs import plant
from ui_harness import KgweServer, kgwe_serve, open_page

pytestmark = pytest.mark.timeout(300)

MIGPLAN_CLUSTER = Path(__file__).resolve().parents[1] / "migplan" / "cluster"
APPLY = {"apiVersion": "kgwe.io/v1alpha1", "kind": "MIGStrategy", "metadata": {"name": "aaa-h100-apply"},
         "spec": {"nodeSelector": {"matchLabels": {"nvidia.com/mig.strategy": "single"}},  # h100-single
                  "rebalanceInterval": "15m", "minUtilization": 0, "mode": "apply"}}


@pytest.fixture(scope="module")
def mig_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KgweServer]:
    workdir = tmp_path_factory.mktemp("mig-ui")
    cluster = workdir / "cluster"
    shutil.copytree(MIGPLAN_CLUSTER, cluster)
    plant(cluster, "zz-apply.yaml", APPLY)
    with kgwe_serve(workdir, cluster) as server:
        yield server


def _texts(locator: Any) -> list[str]:
    return [t.strip() for t in locator.all_inner_texts()]


def _layout(cell: Any) -> dict[str, int]:
    lines = cell.locator("span.line[data-profile]")
    return {lines.nth(i).get_attribute("data-profile"): int(lines.nth(i).get_attribute("data-count") or -1)
            for i in range(lines.count())}


def test_the_mig_plan_page_shows_every_node_as_the_api_plans_it(browser: Any, mig_server: KgweServer) -> None:
    context, page, problems = open_page(browser, mig_server)
    page.set_default_timeout(15_000)
    try:
        page.goto(f"{mig_server.url}/ui/#/mig")
        page.wait_for_selector("section.strategy table.mig-plan")
        if shots := os.environ.get("KGWE_UI_SHOTS"):
            page.set_viewport_size({"width": 1500, "height": 900})
            page.screenshot(path=str(Path(shots) / "mig-plan.png"), full_page=True)
        doc = mig_server.get_json("/api/v1/mig-plan")
        assert page.locator("#as-of").inner_text().startswith("data as of")
        assert [s["name"] for s in doc["strategies"]] == ["aaa-h100-apply", "inference-pool"]
        actions = set()
        for strategy in doc["strategies"]:
            section = page.locator(f'section.strategy[data-strategy="{strategy["name"]}"]')
            assert f"mode {strategy['mode']}" in section.locator("h2").inner_text()
            assert section.locator("tbody tr").count() == len(strategy["nodes"])
            for node in strategy["nodes"]:
                row = section.locator(f'tr[data-node="{node["node"]}"]')
                actions.add((strategy["mode"], node["action"]))
                assert _layout(row.locator('td[data-field="current"]')) == node["current"]
                assert _texts(row.locator('td[data-field="action"]')) == [node["action"]]
                assert row.locator('td[data-field="reason"]').inner_text().startswith(node["reason"])
                apply = row.locator('td[data-field="apply"]').inner_text().strip()
                planned = row.locator('td[data-field="planned"]')
                if node["action"] == "change":
                    assert _layout(planned) == node["planned"]
                    assert node["config"] in planned.inner_text()
                    expected = (f"yes: nvidia.com/mig.config={node['config']}" if strategy["mode"] == "apply"
                                else "no: mode recommend (shown only)")
                    assert apply == expected
                    for served in node["serves"]:
                        assert served["who"] in row.locator('td[data-field="reason"]').inner_text()
                else:
                    assert _layout(planned) == {}
                    assert apply == "no: nothing to change"
        # A change applied (mode apply), one only shown (recommend), nodes kept, and one an earlier strategy took.
        assert {("apply", "change"), ("recommend", "change"), ("recommend", "keep"), ("recommend", "skip")} <= actions
    finally:
        context.close()
    assert problems.errors == [] and problems.foreign_requests == []
