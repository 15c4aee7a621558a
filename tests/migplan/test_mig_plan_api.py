"""`GET /api/v1/mig-plan`: the same plan as the command line, from the cluster model (no Prometheus read)."""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.testclient import TestClient

from webhook import assembly
from webhook.config import load_config
from webhook.migplan.views import plan_cluster
from webhook.server.mig_routes import mig_router

CLUSTER = Path(__file__).parent / "cluster"


def test_the_api_answers_the_plan() -> None:
    runtime = assembly.from_directory(load_config(None), CLUSTER).runtime
    app = FastAPI()
    app.include_router(mig_router(runtime))
    answer = TestClient(app).get("/api/v1/mig-plan")
    assert answer.status_code == 200 and answer.headers["cache-control"] == "no-store"
    doc = answer.json()
    expected = plan_cluster(runtime.store.snapshot()).document()
    assert doc["strategies"] == expected["strategies"] and doc["migConfig"] == expected["migConfig"]
    assert "no recommendations" in doc["usage"]
