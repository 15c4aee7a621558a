"""A missing CRD or RBAC that the controllers need makes `/readyz` fail naming it (pods would otherwise wait
gated in silence): API discovery and SelfSubjectAccessReviews against the fake API server."""

from __future__ import annotations

from pathlib import Path

from kube_fake_apiserver import KGWE, FakeApiServer
from starlette.testclient import TestClient

from webhook.assembly import build_runtime
from webhook.config import load_config
from webhook.controllers.permissions import NATIVE_GANG_NEEDS, ControllerReadiness
from webhook.server.app import create_app

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_everything_granted_and_served_is_no_problem(apiserver: FakeApiServer, api_client) -> None:
    assert ControllerReadiness(api_client, "kgwe-system").check() == []


def test_a_missing_crd_and_a_missing_verb_are_named(apiserver: FakeApiServer, api_client) -> None:
    apiserver.missing.add(f"{KGWE}/tenantquotas")
    apiserver.denied.add(("", "pods", "status", "patch"))
    readiness = ControllerReadiness(api_client, "kgwe-system")
    problems = readiness.check()
    assert any(p.startswith("CRD tenantquotas.kgwe.io (TenantQuota) is not installed") for p in problems), problems
    assert any("may not patch pods/status" in p and "kgwe.io/QuotaAvailable" in p for p in problems), problems
    runtime = build_runtime(load_config(EXAMPLES / "config.yaml"), EXAMPLES / "cluster")
    app = create_app(runtime, ui=False, certificate=_Loaded(), unready=readiness.problems)
    with TestClient(app) as client:
        answer = client.get("/readyz")
    assert answer.status_code == 503
    assert any("tenantquotas.kgwe.io" in r for r in answer.json()["reasons"])
    # Installed and granted again: ready on the next check.
    apiserver.missing.clear()
    apiserver.denied.clear()
    assert readiness.check() == []


def test_the_workload_api_verbs_are_asked_only_while_it_is_served(apiserver: FakeApiServer, api_client) -> None:
    apiserver.denied.add(("scheduling.k8s.io", "podgroups", "", "create"))
    served = [False]
    readiness = ControllerReadiness(api_client, "kgwe-system",
                                    extra_needs=lambda: NATIVE_GANG_NEEDS if served[0] else ())
    assert readiness.check() == []  # no Workload API: KGWE never creates a PodGroup, so it needs no verb for it
    served[0] = True
    (problem,) = readiness.check()
    assert "may not create podgroups.scheduling.k8s.io" in problem and "PodGroup" in problem


class _Loaded:
    loaded = True
