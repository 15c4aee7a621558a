"""The Costs page in a real headless Chromium against `kgwe serve --cluster` (the test cluster of
tests/fixtures/spend_cluster.py, directory mode), and `/api/v1/costs?window=` behind it: the charts render
(spend over time per tenant, idle share, savings, costliest workloads and runs) with the API's figures and
no console errors; the Tenants page shows team-a's budget state."""

from __future__ import annotations

import os
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from spend_cluster import pick_now, write_cluster
from ui_harness import KgweServer, kgwe_serve, open_page

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def costs_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KgweServer]:
    workdir = tmp_path_factory.mktemp("costs")
    # A budget team-a has passed already (508.50 spent, 4.50 an hour more): over however few hours the month has
    # left (a projection against a higher budget falls below it on the month's last day), and the action is Queue.
    cluster, _config = write_cluster(workdir, pick_now(), {"monthly": "500", "warnAt": [0.8], "action": "Queue"})
    with kgwe_serve(workdir, cluster) as running:
        yield running


def _api(server: KgweServer, path: str) -> Any:
    with server.api() as client:
        response = client.get(path)
        assert response.status_code == 200, response.text
        return response.json()


def dollars(text: str) -> str:
    return f"${Decimal(text):,.2f}"


def test_the_api_keeps_the_current_fields_and_adds_the_window(costs_server: KgweServer) -> None:
    body = _api(costs_server, "/api/v1/costs?window=7d")
    assert {"generatedAt", "currency", "rows", "hourlyCost", "pods"} <= set(body)
    assert body["window"]["duration"] == "7d" and body["window"]["source"] == "directory"
    assert {t["tenant"] for t in body["tenants"]} == {"team-a", "team-b", "inference"}
    assert {(r["kind"], r["name"]) for r in body["runs"]} == {("Job", "train"), ("PyTorchJob", "ft")}
    with costs_server.api() as client:
        refused = client.get("/api/v1/costs?window=forever")
    assert refused.status_code == 400 and "30d" in refused.json()["error"]


def test_the_costs_page_draws_its_charts_from_the_api(browser: Any, costs_server: KgweServer) -> None:
    context, page, problems = open_page(browser, costs_server)
    page.set_default_timeout(10_000)
    try:
        # The figures the page drew are those of the answer it read: running pods' costs grow by the second,
        # so an answer fetched here a moment later may differ by a cent or more.
        with page.expect_response(lambda r: "/api/v1/costs" in r.url and "window=7d" in r.url) as answered:
            page.goto(f"{costs_server.url}/ui/#/costs?window=7d")
        page.wait_for_selector("#spend-over-time svg")
        if shots := os.environ.get("KGWE_UI_SHOTS"):
            page.screenshot(path=str(Path(shots) / "costs.png"), full_page=True)
        body = answered.value.json()
        figures = page.locator("#cost-figures")
        assert figures.locator("[data-field=cost]").inner_text() == dollars(body["totals"]["cost"])
        assert figures.locator("[data-field=savings]").inner_text() == dollars(body["totals"]["savings"])
        assert figures.locator("[data-field=idleCost]").inner_text() == "unknown"
        # One column segment per tenant and bucket with spend; three tenants in the legend.
        assert page.locator("#spend-over-time svg rect.bar").count() > 0
        assert page.locator("#spend-over-time .legend li").count() == 3
        assert set(page.locator("#spend-over-time svg rect.bar").evaluate_all(
            "rects => [...new Set(rects.map(r => r.dataset.series))]")) == {"team-a", "team-b", "inference"}
        assert "usage unknown" in page.locator("#idle-share svg").inner_html()
        inference = next(t for t in body["tenants"] if t["tenant"] == "inference")
        assert f"{dollars(inference['savings'])} saved" in page.locator("#savings svg").text_content()
        assert page.locator("#costliest-workloads svg rect.bar").count() == min(10, len(body["workloads"]))
        train = page.locator('#runs tr[data-run="Job/team-a/train"]')
        assert train.locator("[data-field=cost]").inner_text() == "$225.00"
        month = page.locator('#month-table tr[data-tenant="team-a"]')
        assert "over" in month.locator("[data-field=state]").inner_text()
        # Another window is one click away.
        page.click('a.window-link[href="#/costs?window=24h"]')
        page.wait_for_function("() => document.querySelector('#spend-over-time svg title')?.textContent"
                               ".includes('per hour')")

        page.goto(f"{costs_server.url}/ui/#/tenants")
        budget = page.locator('[data-tenant="team-a"] [data-field=budget]')
        budget.wait_for()
        assert "over" in budget.locator("[data-field=state]").inner_text()
        assert "Queue" in budget.inner_text()
    finally:
        context.close()
    assert problems.errors == [], "the page reported errors"
    assert problems.foreign_requests == []
