"""`/api/v1/recommendations` and `/api/v1/idle` answer from the background usage table while it is fresh, and
read Prometheus only when there is no table yet or it is stale (webhook/server/usage_routes.py)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from webhook import assembly
from webhook.config import Config, load_config
from webhook.runtime import Runtime
from webhook.server.usage_routes import usage_router
from webhook.usage.refresher import UsageRefresher
from webhook.usage.service import UsageService
from webhook.usage.views import idle_document, recommendations_document

ROOT = Path(__file__).resolve().parents[2]
DOWN = "http://127.0.0.1:9"  # nothing listens: any read of it is a 503
# `trace` is tests/usage/conftest.py's fixture (a real Prometheus loaded with a generated DCGM trace).
pytestmark = pytest.mark.timeout(600)


def _configured(url: str) -> Config:
    config = load_config(ROOT / "examples" / "config.yaml")
    usage = config.usage.model_copy(update={"prometheus": config.usage.prometheus.model_copy(update={"url": url})})
    return config.model_copy(update={"usage": usage})


def _runtime(config: Config, now: list[float], at: float) -> Runtime:
    """The refresher's clock is `now` (for staleness); Prometheus is read as of `at`, the trace's end, so the
    answer does not depend on how long ago the session's trace was loaded."""
    runtime = assembly.from_directory(config, ROOT / "examples" / "cluster").runtime
    runtime.set_config(config)
    runtime.usage = UsageRefresher(UsageService(lambda: runtime.config, runtime.store.snapshot, clock=lambda: at),
                                   lambda: runtime.config, runtime.store.snapshot, clock=lambda: now[0])
    return runtime


def _client(runtime: Runtime) -> TestClient:
    app = FastAPI()
    # The API's own service reads a Prometheus that is down: a 200 can only have come from the table.
    app.include_router(usage_router(runtime, UsageService(lambda: runtime.config, runtime.store.snapshot, DOWN)))
    return TestClient(app)


def _get(client: TestClient, path: str, **params: str) -> Any:
    answer = client.get(path, params=params)
    assert answer.status_code == 200, answer.text
    return answer.json()


def test_the_api_answers_from_a_fresh_table_and_reads_prometheus_without_one(trace: Any) -> None:
    now = [time.time()]
    runtime = _runtime(_configured(trace.url), now, trace.end)
    client = _client(runtime)
    # No table yet: the API falls back to its own read, here of a Prometheus that is down.
    assert client.get("/api/v1/recommendations").status_code == 503
    assert runtime.usage is not None
    table = runtime.usage.refresh_once()
    assert table is not None and table.report is not None
    whole = _get(client, "/api/v1/recommendations")
    assert whole == recommendations_document(table.report)
    assert whole["recommendations"] and whole["withoutEnoughHistory"]
    team = _get(client, "/api/v1/recommendations", namespace="team-b")
    assert team == recommendations_document(table.report, "team-b")
    assert {r["workload"]["namespace"] for r in team["recommendations"]} == {"team-b"}
    one = whole["recommendations"][0]["key"]
    assert [r["key"] for r in _get(client, "/api/v1/recommendations", workload=one)["recommendations"]] == [one]
    idle = _get(client, "/api/v1/idle")
    assert idle == idle_document(table.report) and idle["idle"]
    assert _get(client, "/api/v1/idle", namespace="team-a") == idle_document(table.report, "team-a")
    # Past rightsizing.staleAfter the table is not used: the API reads Prometheus again (down here).
    now[0] = table.computed_at + runtime.config.rightsizing.stale_seconds + 1
    assert client.get("/api/v1/idle").status_code == 503


def test_a_table_is_not_used_once_the_prometheus_url_is_removed(trace: Any) -> None:
    now = [time.time()]
    runtime = _runtime(_configured(trace.url), now, trace.end)
    assert runtime.usage is not None and runtime.usage.refresh_once() is not None
    runtime.set_config(load_config(ROOT / "examples" / "config.yaml"))  # no usage.prometheus.url
    app = FastAPI()
    app.include_router(usage_router(runtime))
    answer = TestClient(app).get("/api/v1/recommendations")
    assert answer.status_code == 404 and "usage.prometheus.url" in answer.json()["error"]
