"""Schemathesis against the OpenAPI description of the app `kgwe serve` runs (the read-only JSON API under
/api/v1 and whatever else it documents): no 5xx, answers that conform to the description."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import schemathesis
from fastapi import FastAPI
from fault_support import CLUSTER, CONFIG
from hypothesis import HealthCheck, settings
from review_strategies import EXAMPLES

from webhook.assembly import build_runtime
from webhook.config import load_config
from webhook.server.api_routes import PREFIX, api_router
from webhook.server.app import create_app


def served_app() -> FastAPI:
    runtime = build_runtime(load_config(CONFIG), CLUSTER, load_policies=False)
    # A loaded certificate as far as readiness is concerned: the app is called over ASGI, without TLS.
    app = create_app(runtime, ui=True, certificate=SimpleNamespace(loaded=True))
    if not any(getattr(route, "path", "").startswith(PREFIX) for route in app.routes):
        # The JSON API is mounted beside the webhooks; this is how `kgwe serve` includes it.
        app.include_router(api_router(runtime))
    return app


APP = served_app()
schema = schemathesis.openapi.from_asgi("/openapi.json", APP)


def test_the_app_documents_what_it_serves() -> None:
    paths = APP.openapi()["paths"]
    assert {"/mutate", "/validate", "/healthz", "/readyz", "/metrics"} <= set(paths)


@schema.parametrize()
@settings(max_examples=max(10, EXAMPLES // 5), deadline=None, database=None,
          suppress_health_check=list(HealthCheck))
def test_api_conforms_to_its_openapi_description(case: Any) -> None:
    case.call_and_validate()
