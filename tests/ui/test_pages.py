"""The web UI in a real headless Chromium against `kgwe serve --cluster examples/cluster`: every number the
pages show is checked against the JSON API the same server answers, the node filter and sort are used, and
a HardwareProfile is proposed for a selection, then copied and downloaded."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import yaml
from ui_harness import EXAMPLE_CONFIG, KgweServer

pytestmark = pytest.mark.timeout(300)  # the first test may wait for apt-get to install chromium

# One round trip per table: each row's data-field texts and its per-resource numbers.
READ_ROWS = """rows => rows.map(row => ({
  name: row.dataset.node,
  type: row.dataset.type,
  fields: Object.fromEntries([...row.querySelectorAll('[data-field]')]
    .map(cell => [cell.dataset.field, cell.textContent.trim()])),
  title: Object.fromEntries([...row.querySelectorAll('[data-field]')]
    .map(cell => [cell.dataset.field, cell.getAttribute('title')])),
  resources: Object.fromEntries(['used', 'allocatable', 'free'].map(kind => [kind, Object.fromEntries(
    [...row.querySelectorAll(`[data-kind="${kind}"]`)]
      .map(value => [value.closest('[data-resource]').dataset.resource, Number(value.textContent)]))])),
  selectable: !row.querySelector('input.select-node').disabled,
}))"""


def number_text(value: float | int) -> str:
    """A JSON number as JavaScript's String() writes it."""
    return str(int(value)) if float(value).is_integer() else str(value)


def open_view(page: Any, server: KgweServer, route: str, ready: str) -> None:
    page.goto(f"{server.url}/ui/#/{route}")
    page.wait_for_selector(ready)


def node_rows(page: Any) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = page.eval_on_selector_all("#node-table tr.node", READ_ROWS)
    return rows


def shown_resources(resources: dict[str, int], used: dict[str, int]) -> dict[str, int]:
    return {name: value for name, value in resources.items() if value or used.get(name)}


def test_node_view_shows_every_node_as_the_api_does(page: Any, server: KgweServer) -> None:
    api = server.get_json("/api/v1/nodes")
    open_view(page, server, "nodes", "#node-table tr.node")
    rows = {row["name"]: row for row in node_rows(page)}

    assert set(rows) == {node["name"] for node in api["nodes"]}
    for node in api["nodes"]:
        row = rows[node["name"]]
        fields = row["fields"]
        assert fields["gpus"] == number_text(node["gpus"]), node["name"]
        if node["acceleratorType"] is None:
            assert fields["type"] == "no GPUs"
        elif node["acceleratorType"] == "unknown":
            assert fields["type"].startswith("unknown (no labels)")
        else:
            assert fields["type"].startswith(node["productName"]) and node["acceleratorType"] in fields["type"]
        expected_memory = f"{node['memoryMiB'] / 1024:.1f} GiB" if node["memoryMiB"] else "—"
        assert fields["memory"] == expected_memory
        assert fields["nvlink"] == (str(node["nvlinkDomainSize"]) if node["nvlinkDomainSize"] else "—")
        assert fields["clique"] == (node["clique"] or "—")
        for profile, count in (node["mig"] or {}).get("profiles", {}).items():
            assert f"{count}\N{MULTIPLICATION SIGN} {profile}" in fields["mig"]
        if node["sharing"]["strategy"] == "mps":
            assert fields["sharing"] == f"MPS \N{MULTIPLICATION SIGN}{node['sharing']['replicas']}"
        used, allocatable = node["used"], node["allocatable"]
        assert row["resources"]["allocatable"] == shown_resources(allocatable, used), node["name"]
        assert row["resources"]["used"] == {name: used.get(name, 0) for name in shown_resources(allocatable, used)}
        assert row["selectable"] == (node["acceleratorType"] not in (None, "unknown"))

    # The example cluster has a node nobody labelled: shown, named as such, not selectable for a profile.
    assert rows["gpu-unlabelled-01"]["fields"]["type"].startswith("unknown (no labels)")
    assert not rows["gpu-unlabelled-01"]["selectable"]


def test_type_cards_and_group_totals_match_the_api(page: Any, server: KgweServer) -> None:
    api = server.get_json("/api/v1/nodes")
    open_view(page, server, "nodes", "#node-table tr.group")

    for summary in api["types"]:
        card = page.locator(f'.type-card[data-type="{summary["id"]}"]')
        assert card.locator('[data-field="available"]').inner_text() == number_text(summary["available"])
        assert card.locator('[data-field="gpus"]').inner_text() == number_text(summary["gpus"])
        assert card.locator('[data-field="nodes"]').inner_text() == number_text(summary["nodes"])
        group = page.locator(f'tr.group[data-group="{summary["id"]}"]')
        assert group.locator('[data-field="available"]').inner_text() == number_text(summary["available"])
        # The group's GPU total is the sum over its nodes, and it agrees with the API's type summary.
        assert group.locator('[data-field="gpus"]').inner_text() == number_text(summary["gpus"])

    total_gpus = sum(node["gpus"] for node in api["nodes"])
    assert page.locator('tr.total [data-field="gpus"]').inner_text() == str(total_gpus)


def test_filter_by_type_and_name(page: Any, server: KgweServer) -> None:
    api = server.get_json("/api/v1/nodes")
    open_view(page, server, "nodes", "#node-table tr.node")

    page.select_option("#type-filter", "nvidia-h100-80gb")
    h100 = {n["name"] for n in api["nodes"] if n["acceleratorType"] == "nvidia-h100-80gb"}
    assert len(h100) == 2
    assert {row["name"] for row in node_rows(page)} == h100
    assert page.locator("tr.group").count() == 1

    page.select_option("#type-filter", "unknown")
    rows = node_rows(page)
    assert [row["name"] for row in rows] == ["gpu-unlabelled-01"]

    # A type card filters too, and the name filter narrows within the type.
    page.click('.type-card[data-type="nvidia-gb200-186gb"]')
    assert page.locator("#type-filter").input_value() == "nvidia-gb200-186gb"
    assert len(node_rows(page)) == 4
    page.fill("#node-search", "rackb")
    assert {row["name"] for row in node_rows(page)} == {"gb200-rackb-tray1", "gb200-rackb-tray2"}
    assert page.locator('tr.total [data-field="gpus"]').inner_text() == "8"
    # Refresh reads the API again and keeps the filter.
    with page.expect_response(lambda response: response.url.endswith("/api/v1/nodes")):
        page.click("#refresh")
    page.wait_for_selector("#view:not([aria-busy])")
    assert {row["name"] for row in node_rows(page)} == {"gb200-rackb-tray1", "gb200-rackb-tray2"}
    assert page.locator("#node-search").input_value() == "rackb"

    page.fill("#node-search", "")
    page.select_option("#type-filter", "")
    assert len(node_rows(page)) == len(api["nodes"])


def test_sort_by_gpus_and_by_type(page: Any, server: KgweServer) -> None:
    api = server.get_json("/api/v1/nodes")
    open_view(page, server, "nodes", "#node-table tr.node")
    page.uncheck("#group-by-type")
    assert page.locator("tr.group").count() == 0

    page.click('button[data-sort="gpus"]')
    gpus = [int(row["fields"]["gpus"]) for row in node_rows(page)]
    assert gpus == sorted(gpus) and gpus[-1] == max(n["gpus"] for n in api["nodes"])
    assert page.locator('th:has(button[data-sort="gpus"])').get_attribute("aria-sort") == "ascending"
    page.click('button[data-sort="gpus"]')
    assert [int(row["fields"]["gpus"]) for row in node_rows(page)] == sorted(gpus, reverse=True)

    page.click('button[data-sort="type"]')
    types = [row["type"] for row in node_rows(page)]
    # Sorted by type, each type's nodes form one run.
    runs = [t for i, t in enumerate(types) if i == 0 or types[i - 1] != t]
    assert len(runs) == len(set(runs)) == len({n["acceleratorType"] or "none" for n in api["nodes"]})


def read_proposal(page: Any) -> str:
    page.wait_for_selector("#proposal-yaml")
    text: str = page.locator("#proposal-yaml").inner_text()
    return text


def test_profile_yaml_for_a_type_group_is_copied_and_downloaded(page: Any, server: KgweServer) -> None:
    page.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=server.url)
    open_view(page, server, "nodes", "#node-table tr.group")

    page.check('tr.group[data-group="nvidia-h100-80gb"] input.select-group')
    assert page.locator("#selection-count").inner_text().startswith("2 nodes selected")
    page.click("#propose")
    shown = read_proposal(page)

    expected = server.get_json("/api/v1/hardware-profiles/proposal", type="nvidia-h100-80gb")
    assert shown.strip() == expected["yaml"].strip()
    profile = yaml.safe_load(shown)
    assert profile["kind"] == "HardwareProfile" and profile["apiVersion"] == "kgwe.io/v1alpha1"
    assert profile["spec"]["acceleratorTypes"] == ["nvidia-h100-80gb"]
    assert set(profile["spec"]["nodeSelector"].values()) == {"nvidia-h100-80gb"}
    prices = yaml.safe_load(EXAMPLE_CONFIG.read_text())["pricing"]["perGPUHour"]
    assert Decimal(str(profile["spec"]["pricePerGPUHour"])) == Decimal(str(prices["nvidia-h100-80gb"]))

    with page.expect_download() as download_info:
        page.click("#download-yaml")
    download = download_info.value
    assert download.suggested_filename == "nvidia-h100-80gb.yaml"
    assert Path(download.path()).read_text() == expected["yaml"]

    page.click("#copy-yaml")
    page.wait_for_selector("#copy-status:has-text('Copied')")
    assert page.evaluate("navigator.clipboard.readText()") == expected["yaml"]


def test_profile_yaml_for_selected_nodes(page: Any, server: KgweServer) -> None:
    open_view(page, server, "nodes", "#node-table tr.node")
    assert page.locator("#propose").is_disabled()
    assert page.locator('input.select-node[value="gpu-unlabelled-01"]').is_disabled()
    assert page.locator('input.select-node[value="cpu-01"]').is_disabled()

    page.check('input.select-node[value="hgx-a100-mig-02"]')
    page.check('input.select-node[value="hgx-a100-mig-01"]')
    group_box = page.locator('tr.group[data-group="nvidia-a100-80gb"] input.select-group')
    assert group_box.is_checked()
    page.uncheck('input.select-node[value="hgx-a100-mig-01"]')
    assert group_box.evaluate("box => box.indeterminate")
    page.check('input.select-node[value="dgx-h100-02"]')
    page.click("#propose")
    shown = read_proposal(page)

    expected = server.get_json("/api/v1/hardware-profiles/proposal", nodes="dgx-h100-02,hgx-a100-mig-02")
    assert shown.strip() == expected["yaml"].strip()
    assert yaml.safe_load(shown)["kind"] == "HardwareProfile"

    # Changing the selection withdraws the proposal rather than leave YAML for another selection on screen.
    page.click("#clear-selection")
    assert page.locator("#proposal-yaml").count() == 0
    assert page.locator("#propose").is_disabled()


def test_hardware_profiles_show_what_users_get(page: Any, server: KgweServer) -> None:
    api = server.get_json("/api/v1/hardware-profiles")
    open_view(page, server, "profiles", "article.profile")

    assert page.locator("article.profile").count() == len(api["profiles"])
    for profile in api["profiles"]:
        card = page.locator(f'article.profile[data-profile="{profile["name"]}"]')
        assert card.locator("h2").inner_text() == profile["displayName"]
        assert card.locator('[data-field="summary"]').inner_text() == profile["summary"]
        for name in ("available", "total", "pending"):
            assert card.locator(f'dd [data-field="{name}"]').inner_text() == number_text(profile[name])
        price = card.locator('[data-field="price"]').inner_text()
        if profile["pricePerGPUHour"] is None:
            assert price == "no price configured"
        else:
            assert api["currency"] == "USD" and price.startswith(f"${profile['pricePerUnitHour']}")
            if profile["unit"] != "GPU":  # a slice or share: its own price first, the whole GPU's beside it
                assert f" {profile['unit']} (${profile['pricePerGPUHour']} per GPU-hour)" in price
        for accel in profile["acceleratorTypes"]:
            row = card.locator(f'tr[data-type="{accel["id"]}"]')
            assert accel["productName"] in row.inner_text()
            assert row.locator('[data-field="memory"]').inner_text() == f"{accel['memoryGB']} GB"
            assert row.locator('[data-field="architecture"]').inner_text() == accel["architecture"]
            assert row.locator('[data-field="available"]').inner_text() == number_text(accel["available"])
            assert row.locator('[data-field="total"]').inner_text() == number_text(accel["total"])

    premium = page.locator('article.profile[data-profile="premium-h100"]')
    assert premium.locator('[data-field="summary"]').inner_text().startswith("Premium H100 80GB (NVIDIA H100 80GB) - ")


def test_tenants_show_quota_use_and_hourly_cost(page: Any, server: KgweServer) -> None:
    api = server.get_json("/api/v1/tenants")
    open_view(page, server, "tenants", "article.tenant")

    assert page.locator("article.tenant").count() == len(api["tenants"])
    for tenant in api["tenants"]:
        card = page.locator(f'article.tenant[data-tenant="{tenant["tenant"]}"]')
        assert card.locator('[data-field="hourlyCost"]').inner_text() == f"${tenant['hourlyCost']}"
        assert card.locator('[data-field="pods"]').inner_text() == str(tenant["pods"])
        for limit in tenant["limits"]:
            row = card.locator(f'tr[data-limit="{limit["kind"]}/{limit["name"]}"]')
            assert row.locator('[data-field="used"]').inner_text() == number_text(limit["used"])
            assert row.locator('[data-field="gpus"]').inner_text() == number_text(limit["gpus"])

    team_a = page.locator('article.tenant[data-tenant="team-a"]')
    assert team_a.locator('[data-field="hourlyCost"]').inner_text() == "$18.00"
    assert team_a.locator('tr[data-limit="acceleratorType/nvidia-h100-80gb"] [data-field="used"]').inner_text() == "4"


def test_navigation_and_unknown_route(page: Any, server: KgweServer) -> None:
    page.goto(f"{server.url}/ui")  # redirected to /ui/, the node view by default
    page.wait_for_selector("#node-table")
    assert page.url.split("#")[0].endswith("/ui/")
    page.click('nav a[data-route="profiles"]')
    page.wait_for_selector("article.profile")
    assert page.locator('nav a[aria-current="page"]').inner_text() == "Hardware profiles"
    page.goto(f"{server.url}/ui/#/nowhere")
    assert "No page" in page.locator("[role=alert]").inner_text()
