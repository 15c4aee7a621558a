"""Utilisation in the node view (`/api/v1/nodes`, SPEC section 11): per node and per type, GPU-equivalents
allocated beside those busy in the usage table's newest window; absent without a configured Prometheus."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from webhook import assembly
from webhook.config import load_config
from webhook.runtime import Runtime
from webhook.server.api_routes import api_router
from webhook.usage.refresher import UsageRefresher
from webhook.usage.table import NodeUsage, UsageTable

ROOT = Path(__file__).resolve().parents[2]


class _NoPrometheus:
    def read_all(self) -> object:
        raise AssertionError("the node view read Prometheus")


@pytest.fixture
def runtime() -> Runtime:
    config = load_config(ROOT / "examples" / "config.yaml")
    built = assembly.from_directory(config, ROOT / "examples" / "cluster").runtime
    built.usage = UsageRefresher(_NoPrometheus(), lambda: built.config, built.store.snapshot)  # type: ignore[arg-type]
    return built


def _nodes(runtime: Runtime) -> dict[str, object]:
    app = FastAPI()
    app.include_router(api_router(runtime))
    answer = TestClient(app).get("/api/v1/nodes")
    assert answer.status_code == 200
    document: dict[str, object] = answer.json()
    return document


def _configured(runtime: Runtime) -> None:
    config = runtime.config
    usage = config.usage.model_copy(update={"prometheus": config.usage.prometheus.model_copy(
        update={"url": "http://prometheus:9090"})})
    runtime.set_config(config.model_copy(update={"usage": usage}))


def test_no_utilisation_fields_without_a_prometheus(runtime: Runtime) -> None:
    document = _nodes(runtime)
    assert "utilisationAt" not in document
    assert all("utilisation" not in n for n in document["nodes"])  # type: ignore[attr-defined]


def test_nodes_and_types_show_allocated_beside_used(runtime: Runtime) -> None:
    _configured(runtime)
    document = _nodes(runtime)
    assert document["utilisationAt"] is None  # configured, no table yet: unknown everywhere
    assert all(n["utilisation"] is None for n in document["nodes"])  # type: ignore[attr-defined, index]
    busy = next(n for n in document["nodes"] if n["used"])  # type: ignore[attr-defined, index]
    node = busy["name"]
    table = UsageTable(time.time(), 1_700_000_000.0, nodes={node: NodeUsage(
        node=node, pods=2, devices=3, memory_used_mib=30_000, busy_gpu_equivalents=0.42,
        by_type={str(busy["acceleratorType"]): 0.42})})
    assert runtime.usage is not None
    runtime.usage.set_table(table)
    document = _nodes(runtime)
    assert document["utilisationAt"] == 1_700_000_000.0
    row = next(n for n in document["nodes"] if n["name"] == node)  # type: ignore[attr-defined, index]
    assert row["utilisation"]["busyGpuEquivalents"] == 0.42
    assert row["utilisation"]["memoryUsedMib"] == 30_000
    assert row["utilisation"]["allocatedGpuEquivalents"] > 0
    others = [n for n in document["nodes"] if n["name"] != node]  # type: ignore[attr-defined, index]
    assert all(n["utilisation"] is None for n in others)
    kind = next(t for t in document["types"] if t["id"] == busy["acceleratorType"])  # type: ignore[attr-defined, index]
    assert kind["utilisation"]["busyGpuEquivalents"] == 0.42
    assert kind["utilisation"]["nodesWithUsage"] == 1
    assert kind["utilisation"]["allocatedGpuEquivalents"] >= row["utilisation"]["allocatedGpuEquivalents"]
