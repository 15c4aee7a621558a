"""Recommendations and idle GPUs from a real Prometheus loaded with DCGM series (SPEC section 11)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from webhook import assembly
from webhook.cluster.model import ClusterModel
from webhook.config import Config, load_config
from webhook.reports.commands import run
from webhook.server.usage_routes import usage_router
from webhook.usage import promql
from webhook.usage.prometheus import PrometheusUnavailable
from webhook.usage.service import UsageService
from webhook.usage.views import idle_document, recommendations_document

if TYPE_CHECKING:  # a name only: importing `conftest` at run time meets another folder's conftest first
    from conftest import Trace

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.timeout(600)  # the first test may wait for apt-get to install prometheus


@pytest.fixture(scope="module")
def config() -> Config:
    return load_config(ROOT / "examples" / "config.yaml")


@pytest.fixture(scope="module")
def model(config: Config) -> ClusterModel:
    return assembly.from_directory(config, ROOT / "examples" / "cluster").runtime.store.snapshot()


@pytest.fixture(scope="module")
def recommendations(trace: Trace, config: Config, model: ClusterModel) -> dict[str, Any]:
    report = UsageService(lambda: config, lambda: model, trace.url).report(at=trace.end)
    return recommendations_document(report)


def test_every_recommendation_holds_the_peak_seen_plus_the_margin(
    trace: Trace, recommendations: dict[str, Any], config: Config
) -> None:
    margin = 1 + config.rightsizing.memory_margin
    peaks = {w.key: w for w in trace.workloads}
    assert recommendations["recommendations"]
    for row in recommendations["recommendations"]:
        workload = row["workload"]
        traced = peaks[f"{workload['kind']}/{workload['namespace']}/{workload['name']}"]
        peak = row["peakMemoryMib"]  # the highest sample of any of its GPUs (of its part: master, worker)
        assert peak == round(traced.peak_mib) if not workload["part"] else peak <= round(traced.peak_mib)
        shape = row["recommended"]
        if not row["change"]:
            continue  # keeps what it asks, which held it
        assert shape["memoryMib"] >= peak * margin, row
        if shape["gpus"] < row["asks"]["gpus"]:  # fewer GPUs: together they hold the sum of the peaks
            assert shape["gpus"] * shape["memoryMib"] >= traced.peak_total_mib * margin, row
    changed = [r for r in recommendations["recommendations"] if r["change"]]
    assert changed and recommendations["gpuEquivalentsSaved"] > 0
    assert all(r["saved"]["gpuEquivalentsPerPod"] >= 0 and r["recommended"]["intent"] for r in changed)


def test_workloads_without_enough_history_get_none(trace: Trace, recommendations: dict[str, Any]) -> None:
    short = {w.key for w in trace.workloads if w.pods[0].end - w.pods[0].start < 24 * 3600}
    assert short
    keys = {r["key"].rsplit("/", 1)[0] if r["workload"]["part"] else r["key"]
            for r in recommendations["recommendations"]}
    assert not short & keys
    assert short <= {k.rsplit("/", 1)[0] if k.count("/") > 2 else k for k in recommendations["withoutEnoughHistory"]}


def test_busy_training_keeps_its_gpus_and_overasked_jobs_get_fewer(recommendations: dict[str, Any]) -> None:
    rows = {r["workload"]["name"]: r for r in recommendations["recommendations"]}
    busy = [r for name, r in rows.items() if name.startswith("busy-")]
    assert busy and all(not r["change"] for r in busy)
    overasked = [r for name, r in rows.items() if name.startswith("steady-job-")]
    assert overasked and all(r["recommended"]["gpus"] < r["asks"]["gpus"] for r in overasked)


def test_idle_pods_are_listed_with_tenant_and_cost(trace: Trace, config: Config, model: ClusterModel) -> None:
    report = UsageService(lambda: config, lambda: model, trace.url).report(at=trace.end)
    doc = idle_document(report)
    listed = {(i["namespace"], i["pod"]) for i in doc["idle"]}
    idle = {(w.namespace, p.name) for w in trace.workloads if w.profile == "idle" for p in w.pods
            if p.end - p.start >= config.rightsizing.idle_for_seconds}
    assert idle and idle == listed
    for row in doc["idle"]:
        assert row["tenant"] == row["namespace"] and row["hourlyCost"] == "4.50"  # a whole H100
    assert doc["gpuEquivalents"] == len(idle)


def test_the_same_history_gives_the_same_answer_in_bounded_queries(
    trace: Trace, config: Config, model: ClusterModel, recommendations: dict[str, Any]
) -> None:
    again = recommendations_document(UsageService(lambda: config, lambda: model, trace.url).report(at=trace.end + 59))
    assert again == recommendations
    chunks = promql.Grid.ending(trace.end, config.usage.lookback_seconds, config.usage.interval_seconds).chunks(
        config.usage.chunk_seconds)
    assert recommendations["queries"] == 3 * len(chunks) + 1  # never one per pod


def test_kgwe_recommend_and_the_api(trace: Trace, capsys: pytest.CaptureFixture[str]) -> None:
    base = ["--cluster", str(ROOT / "examples" / "cluster"), "--config", str(ROOT / "examples" / "config.yaml"),
            "--prometheus", trace.url, "--at", str(trace.end)]
    assert run("recommend", [*base, "-n", "team-a", "-o", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["recommendations"] and {r["workload"]["namespace"] for r in doc["recommendations"]} == {"team-a"}
    assert run("recommend", [*base, "--idle"]) == 0
    assert "Idle:" in capsys.readouterr().out
    assert run("recommend", [*base[:4], "--prometheus", "http://127.0.0.1:9"]) == 2
    assert "did not answer" in capsys.readouterr().err

    config = load_config(ROOT / "examples" / "config.yaml")
    runtime = assembly.from_directory(config, ROOT / "examples" / "cluster").runtime
    app = FastAPI()
    app.include_router(usage_router(runtime, UsageService(lambda: config, runtime.store.snapshot, trace.url)))
    client = TestClient(app)
    answer = client.get("/api/v1/recommendations", params={"namespace": "team-b"})
    assert answer.status_code == 200 and answer.json()["recommendations"]
    assert client.get("/api/v1/idle").status_code == 200
    down = FastAPI()
    down.include_router(usage_router(runtime, UsageService(lambda: config, runtime.store.snapshot,
                                                           "http://127.0.0.1:9")))
    refused = TestClient(down).get("/api/v1/idle")
    assert refused.status_code == 503 and "did not answer" in refused.json()["error"]
    unset = FastAPI()
    unset.include_router(usage_router(runtime))
    assert TestClient(unset).get("/api/v1/recommendations").status_code == 404


def test_a_prometheus_that_is_down_is_one_clear_error(config: Config) -> None:
    with pytest.raises(PrometheusUnavailable, match=r"127\.0\.0\.1:9 did not answer"):
        UsageService(lambda: config, lambda: None, "http://127.0.0.1:9").report()
