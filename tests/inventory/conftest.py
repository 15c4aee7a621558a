"""Inventory API fixtures: the example cluster served by a real FastAPI app with the read-only API router."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from cluster_dirs import EXAMPLE_CLUSTER, EXAMPLE_CONFIG
from fastapi import FastAPI
from fastapi.testclient import TestClient

from webhook.assembly import build_runtime
from webhook.config import load_config
from webhook.runtime import Runtime
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
