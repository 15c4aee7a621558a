"""What GPUs do, on the pages (SPEC section 11): the Workloads page's recommendation columns, the Nodes page's
utilisation columns and the Idle GPUs page in a real headless Chromium, against `kgwe serve` whose configuration
points at a real Prometheus loaded with a generated DCGM trace (bench/usage_traces.py); without a Prometheus, no
such column, and the Idle GPUs page says what to set."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from datetime import datetime, timedelta
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path
from typing import Any

import pytest
import yaml
from cluster_dirs import EXAMPLE_CONFIG, copy_example_cluster, plant
from ui_harness import KgweServer, kgwe_serve, open_page
from usage_traces import PrometheusMissing, TraceWorkload, ensure_prometheus, generate, openmetrics, prometheus_with

pytestmark = pytest.mark.timeout(600)  # the first run may wait for apt-get to install prometheus

SEED = 31
# The generated host labels put on this cluster's nodes (the DCGM exporter's chart labels hosts by node name).
HOSTS = {
    "node-h100-0": "dgx-h100-01", "node-h100-1": "dgx-h100-02", "node-h100-2": "dgx-h100-02",
    "node-a100-0": "hgx-a100-mig-01", "node-a100-1": "hgx-a100-mig-02", "node-l4-0": "l4-mps-01",
}
DASH = "—"


def _template(gpus: int) -> dict[str, Any]:
    return {"spec": {"containers": [{"name": "main", "image": "cuda", "resources": {"limits": {
        "nvidia.com/gpu": str(gpus)}}}]}}


def _manifest(workload: TraceWorkload) -> dict[str, Any] | None:
    """The cluster object of a generated workload, so that the Workloads page lists it."""
    meta = {"name": workload.name, "namespace": workload.namespace}
    replicas = len(workload.pods)
    template = _template(workload.gpus)
    if workload.kind in ("Deployment", "StatefulSet"):
        return {"apiVersion": "apps/v1", "kind": workload.kind, "metadata": meta, "spec": {
            "replicas": replicas, "selector": {"matchLabels": {"app": workload.name}},
            "template": {"metadata": {"labels": {"app": workload.name}}, **template}}}
    if workload.kind == "Job":
        return {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta, "spec": {
            "parallelism": replicas, "template": {"spec": {**template["spec"], "restartPolicy": "Never"}}}}
    if workload.kind == "PyTorchJob":
        return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": meta,
                "spec": {"pytorchReplicaSpecs": {
            "Master": {"replicas": 1, "template": template},
            "Worker": {"replicas": replicas - 1, "template": template}}}}
    return None  # a bare pod: no workload object


@pytest.fixture(scope="module")
def usage_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[KgweServer, list[TraceWorkload]]]:
    try:
        ensure_prometheus()
    except PrometheusMissing as exc:
        pytest.skip(str(exc))
    workdir = tmp_path_factory.mktemp("usage-ui")
    end = float(int(time.time()) // 300 * 300)
    # Eight workloads: one of each kind the generator makes, and the last (a Deployment) only 6 hours old.
    workloads = generate(SEED, end, 26.0, workloads=8)
    cluster = copy_example_cluster(workdir / "cluster")
    namespaces = sorted({w.namespace for w in workloads} - {"team-a"})
    plant(cluster, "zz-usage.yaml",
          *({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": n}} for n in namespaces),
          *filter(None, (_manifest(w) for w in workloads)))
    config = yaml.safe_load(EXAMPLE_CONFIG.read_text(encoding="utf-8"))
    with prometheus_with(openmetrics(workloads, SEED, every=120.0, hosts=HOSTS), workdir) as url:
        config.setdefault("usage", {})["prometheus"] = {"url": url}
        config_file = workdir / "config.yaml"
        config_file.write_text(yaml.safe_dump(config), encoding="utf-8")
        # One worker: the page and the test read the same usage table.
        with kgwe_serve(workdir, cluster, "--workers", "1", config=config_file) as server:
            _wait_for_table(server)
            yield server, workloads


def _wait_for_table(server: KgweServer) -> None:
    deadline = time.monotonic() + 120
    while server.get_json("/api/v1/nodes").get("utilisationAt") is None:
        assert time.monotonic() < deadline, f"no usage table after 120 s:\n{server.log()[-3000:]}"
        time.sleep(0.5)


def to_fixed(value: float, digits: int) -> str:
    """JavaScript's Number.prototype.toFixed (a tie goes up, on the exact binary value)."""
    return str(Decimal(value).quantize(Decimal(1).scaleb(-digits), rounding=ROUND_HALF_UP))


def js_number(value: float) -> str:
    """String(x) in JavaScript for the API's short decimals: 2 not 2.0."""
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def usd(amount: str | None) -> str:
    if amount is None:
        return DASH
    decimals = max(2, len(amount.partition(".")[2]))
    return f"${Decimal(amount):,.{decimals}f}"


def _texts(row: Any, selector: str) -> list[str]:
    return [t.strip() for t in row.locator(selector).all_inner_texts()]


def test_the_workloads_page_shows_each_recommendation_as_the_api_gives_it(
    browser: Any, usage_server: tuple[KgweServer, list[TraceWorkload]]
) -> None:
    server, workloads = usage_server
    context, page, problems = open_page(browser, server)
    page.set_default_timeout(15_000)
    try:
        page.goto(f"{server.url}/ui/#/workloads")
        page.wait_for_selector("#workloads")
        if shots := os.environ.get("KGWE_UI_SHOTS"):
            page.screenshot(path=str(Path(shots) / "workloads-usage.png"), full_page=True)
        usage = server.get_json("/api/v1/recommendations")
        listed = server.get_json("/api/v1/workloads")
        assert listed["usageConfigured"] is True
        headers = [t.strip() for t in page.locator("#workloads thead th").all_inner_texts()]
        assert headers[-4:] == ["Recommended shape", "Saves (GPU-eq)", "Saves (USD/h)", "Confidence"]
        by_key = {r["key"]: r for r in usage["recommendations"]}
        seen = set()
        for workload in listed["workloads"]:
            base = f"{workload['kind']}/{workload['namespace']}/{workload['name']}"
            row = page.locator(f'tr[data-workload="{base}"]')
            mine = [k for k in by_key if k == base or k.startswith(f"{base}/")]
            waiting = [k for k in usage["withoutEnoughHistory"] if k == base or k.startswith(f"{base}/")]
            if not mine:
                expected = "not enough history" if waiting else "no usage seen"
                assert _texts(row, 'td[data-field="recommended"]') == [expected]
                assert _texts(row, 'td[data-field="saved"]') == [DASH]
                continue
            for key in mine:
                found = by_key[key]
                seen.add(key)
                line = f'span.line[data-key="{key}"] .value'
                assert _texts(row, f'td[data-field="recommended"] {line}') == [found["recommended"]["shape"]]
                assert _texts(row, f'td[data-field="saved"] {line}') == [js_number(found["saved"]["gpuEquivalents"])]
                assert _texts(row, f'td[data-field="hourlySaved"] {line}') == [usd(found["saved"]["hourly"])]
                assert _texts(row, f'td[data-field="confidence"] {line}') == [
                    f"{found['confidenceLevel']} ({to_fixed(found['confidence'], 2)})"]
        # Every generated workload with a cluster object and a day of history is on the page, parts included.
        planted = {w.key for w in workloads if w.kind != "Pod"}
        assert {k.rsplit("/", 1)[0] if k.startswith("PyTorchJob/") else k for k in seen} == planted - {
            k for k in usage["withoutEnoughHistory"]}
        assert any(k.startswith("PyTorchJob/") for k in seen)  # one row, a line per part (master, worker)
        assert any(r["change"] for r in by_key.values() if r["key"] in seen)
        young = page.locator(f'tr[data-workload="{workloads[-1].key}"] td[data-field="recommended"]')
        assert young.inner_text().strip() == "not enough history"
        # The bare pod's recommendation has no row here; the note says so.
        assert "1 recommendation for workloads not listed here" in page.locator("#usage-note").inner_text()
    finally:
        context.close()
    assert problems.errors == [] and problems.foreign_requests == []


def test_the_nodes_page_shows_utilisation_per_node_and_type(
    browser: Any, usage_server: tuple[KgweServer, list[TraceWorkload]]
) -> None:
    server, _ = usage_server
    context, page, problems = open_page(browser, server)
    page.set_default_timeout(15_000)
    try:
        page.goto(f"{server.url}/ui/#/nodes")
        page.wait_for_selector("#node-table tbody tr.node")
        if shots := os.environ.get("KGWE_UI_SHOTS"):
            page.set_viewport_size({"width": 1700, "height": 900})  # the whole table, the new columns at its end
            page.screenshot(path=str(Path(shots) / "nodes-usage.png"), full_page=True)
        data = server.get_json("/api/v1/nodes")
        headers = [t.strip() for t in page.locator("#node-table thead th").all_inner_texts()]
        assert headers[-2:] == ["Busy / allocated (GPU-eq)", "Memory used (GiB)"]
        known = 0
        for node in data["nodes"]:
            row = page.locator(f'tr.node[data-node="{node["name"]}"]')
            use = node["utilisation"]
            if not node.get("gpus"):
                assert _texts(row, 'td[data-field="busy"]') == [DASH]
            elif use is None:
                assert _texts(row, 'td[data-field="busy"]') == ["unknown"]
            else:
                known += 1
                assert _texts(row, 'td[data-field="busy"] .value') == [
                    js_number(use["busyGpuEquivalents"]), js_number(use["allocatedGpuEquivalents"])]
                assert _texts(row, 'td[data-field="memoryUsed"]') == [to_fixed(use["memoryUsedMib"] / 1024, 1)]
        assert known >= 3  # the H100, A100 and L4 nodes the trace's pods ran on
        for kind in data["types"]:
            use = kind["utilisation"]
            row = page.locator(f'tr.group[data-group="{kind["id"]}"]')
            if use is None or not row.count():
                continue
            assert _texts(row, 'td[data-field="busy"] .value') == [
                js_number(use["busyGpuEquivalents"]), js_number(use["allocatedGpuEquivalents"])]
            assert _texts(row, 'td[data-field="memoryUsed"]') == [to_fixed(use["memoryUsedMib"] / 1024, 1)]
        # Sorting by busy puts the busiest node first (unknown nodes sort below every known one).
        page.uncheck("#group-by-type")
        page.click('button[data-sort="busy"]')
        page.click('button[data-sort="busy"]')
        first = page.locator("#node-table tbody tr.node").first.get_attribute("data-node")
        busiest = max((n for n in data["nodes"] if n["utilisation"]),
                      key=lambda n: n["utilisation"]["busyGpuEquivalents"])
        assert first == busiest["name"]
    finally:
        context.close()
    assert problems.errors == [] and problems.foreign_requests == []


def test_the_idle_page_lists_each_idle_pod_as_the_api_gives_it(
    browser: Any, usage_server: tuple[KgweServer, list[TraceWorkload]]
) -> None:
    server, _ = usage_server
    context, page, problems = open_page(browser, server)
    page.set_default_timeout(15_000)
    try:
        page.goto(f"{server.url}/ui/#/idle")
        page.wait_for_selector("#idle tbody tr")
        if shots := os.environ.get("KGWE_UI_SHOTS"):
            page.screenshot(path=str(Path(shots) / "idle.png"), full_page=True)
        doc = server.get_json("/api/v1/idle")
        assert doc["idle"], "the trace has idle inference pods"
        assert page.locator("#as-of").inner_text().startswith("data as of")
        assert page.locator("#idle tbody tr").count() == len(doc["idle"])
        at = datetime.fromisoformat(doc["at"].replace("Z", "+00:00"))
        for row in doc["idle"]:
            line = page.locator(f'#idle tr[data-pod="{row["namespace"]}/{row["pod"]}"]')
            assert row["workload"] in line.locator("th").inner_text()
            assert _texts(line, 'td[data-field="tenant"]') == [row["tenant"]]
            assert _texts(line, 'td[data-field="gpus"]') == [str(row["gpus"])]
            assert _texts(line, 'td[data-field="gpuEquivalents"]') == [js_number(row["gpuEquivalents"])]
            assert _texts(line, 'td[data-field="idleHours"]') == [f"{js_number(row['idleHours'])} h"]
            assert _texts(line, 'td[data-field="activity"]') == [f"{to_fixed(row['highestEngineActivity'] * 100, 1)} %"]
            assert _texts(line, 'td[data-field="hourlyCost"]') == [usd(row["hourlyCost"])]
            since = datetime.fromisoformat(str(line.locator("time").get_attribute("datetime")).replace("Z", "+00:00"))
            assert since == at - timedelta(hours=row["idleHours"])
        # The costliest first, and the totals as the API adds them up.
        shown = page.locator("#idle tbody tr").evaluate_all("rows => rows.map((r) => r.dataset.pod)")
        costs = {f"{r['namespace']}/{r['pod']}": Decimal(r["hourlyCost"] or -1) for r in doc["idle"]}
        assert [costs[p] for p in shown] == sorted(costs.values(), reverse=True)
        note = page.locator("#idle-note")
        assert note.locator('[data-field="pods"]').inner_text() == f"{len(doc['idle'])} pod" + (
            "s" if len(doc["idle"]) != 1 else "")
        assert note.locator('[data-field="gpuEquivalents"]').inner_text() == js_number(doc["gpuEquivalents"])
        assert note.locator('[data-field="hourlyCost"]').inner_text() == usd(doc["hourlyCost"])
    finally:
        context.close()
    assert problems.errors == [] and problems.foreign_requests == []


def test_without_a_prometheus_there_is_no_usage_column(page: Any, server: KgweServer) -> None:
    assert "utilisationAt" not in server.get_json("/api/v1/nodes")
    assert server.get_json("/api/v1/workloads")["usageConfigured"] is False
    page.goto(f"{server.url}/ui/#/nodes")
    page.wait_for_selector("#node-table tbody tr.node")
    headers = " ".join(page.locator("#node-table thead th").all_inner_texts())
    assert "Busy" not in headers and "Memory used" not in headers
    assert page.locator('[data-field="busy"], [data-field="memoryUsed"], #utilisation-note').count() == 0
    page.goto(f"{server.url}/ui/#/workloads")
    page.wait_for_selector("#workloads")
    headers = " ".join(page.locator("#workloads thead th").all_inner_texts())
    assert "Recommended" not in headers and "Saves" not in headers and "Confidence" not in headers
    assert page.locator('[data-field="recommended"], #usage-note').count() == 0


def test_without_a_prometheus_the_idle_page_says_what_to_set(browser: Any, server: KgweServer) -> None:
    context, page, problems = open_page(browser, server)
    page.set_default_timeout(10_000)
    try:
        page.goto(f"{server.url}/ui/#/idle")
        page.wait_for_selector("#idle-note")
        assert "usage.prometheus.url" in page.locator("#idle-note").inner_text()
        assert page.locator("#idle").count() == 0
    finally:
        context.close()
    # The API's answer is 404 (docs/usage.md), which the browser logs; nothing else went wrong.
    assert [e for e in problems.errors if "404" not in e] == [] and len(problems.errors) == 1
    assert problems.foreign_requests == []
