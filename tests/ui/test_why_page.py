"""The "Why" page in a real headless Chromium against `kgwe serve`: the pending GPU pods are listed, and a
pod's explanation (trace, policies, what blocks it now) shows what /api/v1/explain answers."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cluster_dirs import copy_example_cluster, gpu_pod, plant
from ui_harness import KgweServer, kgwe_serve, open_page

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def why_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KgweServer]:
    workdir = tmp_path_factory.mktemp("why")
    cluster = copy_example_cluster(workdir / "cluster")
    plant(cluster, "zz-waiting.yaml",
          gpu_pod("too-big", "ml-research", gpus=16, phase="Pending",
                  annotations={"kgwe.io/accelerator": "nvidia-h100-80gb"}))
    with kgwe_serve(workdir, cluster) as running:
        yield running


def _api(server: KgweServer, params: dict[str, str] | None = None) -> Any:
    with server.api() as client:
        return client.get("/api/v1/explain", params=params or {}).json()


def test_why_lists_waiting_pods_and_explains_one(browser: Any, why_server: KgweServer) -> None:
    context, page, problems = open_page(browser, why_server)
    page.set_default_timeout(10_000)
    try:
        page.goto(f"{why_server.url}/ui/#/why")
        page.wait_for_selector("#pending")
        listed = page.locator("#pending a").all_inner_texts()
        assert listed == _api(why_server)["pending"] and "ml-research/too-big" in listed
        page.click('#pending a:text("ml-research/too-big")')
        page.wait_for_selector("#trace")
        if shots := __import__("os").environ.get("KGWE_UI_SHOTS"):
            page.screenshot(path=str(Path(shots) / "why.png"), full_page=True)
        body = _api(why_server, {"pod": "ml-research/too-big"})
        steps = page.locator("#trace > li").all_inner_texts()
        assert len(steps) == len(body["trace"])
        assert "at most 8 GPUs on one node, the pod asks for 16" in steps[-1]
        assert page.locator("#refusals li").all_inner_texts() == body["refusals"]
        assert page.locator("#state").inner_text() == "State: pending."
        # A refused pod: the refusal first, then what else blocks it, never "nothing blocks it".
        headings = page.locator("h2").all_inner_texts()
        assert headings.index("Refused") < headings.index("What else blocks it now")
        blocking = page.locator("#blocking li").all_inner_texts()
        assert blocking == body["blocking"] and blocking[0].startswith("KGWE would refuse it")
        assert not any(b.startswith("nothing") for b in blocking)
        # A mistyped pod: the form and what was typed stay, the error shows beside it.
        page.fill("input[name=pod]", "nowhere/nothing")
        page.click("form.why-form button")
        page.wait_for_selector("form.why-form [role=alert]")
        assert "no pod nowhere/nothing" in page.locator("#why-error").inner_text()
        assert page.locator("input[name=pod]").input_value() == "nowhere/nothing"
        page.fill("input[name=pod]", "Not A Pod")
        page.click("form.why-form button")
        page.wait_for_function("() => document.querySelector('#why-error')?.textContent.includes('NAMESPACE/NAME')")
        assert page.locator("input[name=pod]").input_value() == "Not A Pod"
        page.fill("input[name=pod]", "ml-research/too-big")
        page.click("form.why-form button")
        page.wait_for_selector("#trace")
        assert page.locator("#why-error").count() == 0
    finally:
        context.close()
    assert problems.foreign_requests == []


def test_auto_refresh_is_opt_in_and_remembered(browser: Any, why_server: KgweServer) -> None:
    context, page, _problems = open_page(browser, why_server)
    page.set_default_timeout(10_000)
    try:
        page.goto(f"{why_server.url}/ui/#/nodes")
        page.wait_for_selector("#node-table")
        box = page.locator("#auto-refresh")
        assert not box.is_checked()
        box.check()
        page.reload()
        page.wait_for_selector("#node-table")
        assert page.locator("#auto-refresh").is_checked()
        # Pods per node are shown and add up in the totals row.
        pods = [int(t) for t in page.locator('tr.node [data-field="pods"]').all_inner_texts()]
        assert page.locator('tr.total [data-field="pods"]').inner_text() == str(sum(pods))
    finally:
        context.close()


def test_totals_add_up_each_unit_on_its_own(browser: Any, why_server: KgweServer) -> None:
    """Issue 35: the totals row counted physical GPUs while its rows counted MPS replicas. Now every row counts
    each resource in its own unit, and a total adds up one unit at a time, never GPUs with replicas."""
    with why_server.api() as client:
        nodes = client.get("/api/v1/nodes").json()["nodes"]
    expected: dict[str, float] = {}
    for node in nodes:
        for line in node["resources"]:
            expected[line["unit"]] = round(expected.get(line["unit"], 0) + line["allocatable"], 2)
    assert {"GPU", "MPS replica"} <= set(expected)
    context, page, _problems = open_page(browser, why_server)
    page.set_default_timeout(10_000)
    try:
        page.goto(f"{why_server.url}/ui/#/nodes")
        page.wait_for_selector("#node-table tr.total")
        shown = page.eval_on_selector_all(
            "tr.total td:nth-last-child(2) [data-resource]",
            "lines => lines.map(l => [l.dataset.resource,"
            " Number(l.querySelector('[data-kind=allocatable]').textContent), l.textContent])")
    finally:
        context.close()
    assert {unit: value for unit, value, _text in shown} == expected
    texts = {unit: text for unit, _value, text in shown}
    assert texts["MPS replica"].endswith("MPS replicas") and texts["GPU"].endswith("GPUs")
