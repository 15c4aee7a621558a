"""Schemathesis against the OpenAPI description of the app `kgwe serve` runs (the read-only JSON API under
/api/v1 and whatever else it documents): no 5xx, answers that conform to the description.

The operations and their cases (the coverage phase's, then hypothesis') are built when the test runs, in the one
worker that runs it: `schema.parametrize()` built them while collecting, in every pytest process (about 2 CPU-s
each), and its run-time form (`schemathesis.pytest.from_fixture`) does not run on pytest 9.2. Every operation
is run; the failures are reported together, each with the operation it came from."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
import schemathesis
from fastapi import FastAPI
from fault_support import CLUSTER, CONFIG
from hypothesis import HealthCheck, settings
from review_strategies import EXAMPLES
from schemathesis.checks import load_all_checks
from schemathesis.pytest.lazy import get_all_tests

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


@pytest.fixture(scope="module")
def app() -> FastAPI:
    return served_app()


def test_the_app_documents_what_it_serves(app: FastAPI) -> None:
    paths = app.openapi()["paths"]
    assert {"/mutate", "/validate", "/healthz", "/readyz", "/metrics"} <= set(paths)


def _call_and_validate(case: Any) -> None:
    case.call_and_validate()


def test_api_conforms_to_its_openapi_description(app: FastAPI) -> None:
    schema = schemathesis.openapi.from_asgi("/openapi.json", app)
    load_all_checks()  # the checks call_and_validate runs, registered before the first case
    examples = settings(max_examples=max(10, EXAMPLES // 5), deadline=None, database=None,
                        suppress_health_check=list(HealthCheck))
    operations, failures = 0, []
    for result in get_all_tests(schema=schema, test_func=_call_and_validate, settings=examples, given_kwargs={}):
        operation, test = result.ok()  # a malformed operation raises its InvalidSchema, which names it
        operations += 1
        try:
            test()
        except Exception as exc:
            failures.append(f"{operation.label}: {exc}")
    assert operations >= 5
    assert not failures, "\n\n".join(failures)
