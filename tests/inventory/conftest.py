"""Inventory API fixtures: the example cluster served by a real FastAPI app with the read-only API router."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))

from cluster_dirs import EXAMPLE_CLUSTER, EXAMPLE_CONFIG

from webhook.config import load_config
from webhook.runtime import Runtime, build_runtime
from webhook.server.api_routes import api_router


@pytest.fixture(scope="module")
def example_runtime() -> Runtime:
    return build_runtime(load_config(EXAMPLE_CONFIG), EXAMPLE_CLUSTER)


@pytest.fixture(scope="module")
def client(example_runtime: Runtime) -> Iterator[TestClient]:
    app = FastAPI()
    app.include_router(api_router(example_runtime))
    with TestClient(app) as test_client:
        yield test_client
