"""Webhook-wide audit mode (`mode: audit`): every mutation computed and reported, no patch returned.

Through the real FastAPI app with AdmissionReviews as the API server posts them.
"""

from __future__ import annotations

import base64
import copy
import uuid
from collections.abc import Iterator
from typing import Any

import orjson
import pytest
from cluster_dirs import EXAMPLE_CLUSTER, EXAMPLE_CONFIG
from fastapi.testclient import TestClient
from prometheus_client import REGISTRY

from webhook.assembly import build_runtime
from webhook.config import load_config
from webhook.runtime import Runtime
from webhook.server.app import create_app

H100_POD: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "trainer", "namespace": "team-a", "annotations": {"kgwe.io/accelerator": "nvidia-h100-80gb"}},
    "spec": {"containers": [{"name": "main", "image": "cuda:12", "resources": {
        "limits": {"nvidia.com/gpu": "2", "memory": "64Gi"}}}]},
}


def review(pod: dict[str, Any]) -> dict[str, Any]:
    gvk = {"group": "", "version": "v1", "kind": "Pod"}
    gvr = {"group": "", "version": "v1", "resource": "pods"}
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": str(uuid.uuid4()), "kind": gvk, "resource": gvr, "requestKind": gvk, "requestResource": gvr,
            "name": pod["metadata"]["name"], "namespace": pod["metadata"]["namespace"], "operation": "CREATE",
            "userInfo": {"username": "alice@example.com", "groups": ["team-a", "system:authenticated"]},
            "object": copy.deepcopy(pod), "oldObject": None, "dryRun": False,
            "options": {"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1"},
        },
    }


def runtime_in(mode: str) -> Runtime:
    config = load_config(EXAMPLE_CONFIG).model_copy(update={"mode": mode})
    return build_runtime(config, EXAMPLE_CLUSTER)


@pytest.fixture
def audit_client() -> Iterator[TestClient]:
    with TestClient(create_app(runtime_in("audit"), ui=False)) as client:
        yield client


def would_mutate(step: str) -> float:
    return REGISTRY.get_sample_value("kgwe_would_mutate_total", {"step": step}) or 0.0


def test_enforce_mode_patches_the_pod() -> None:
    with TestClient(create_app(runtime_in("enforce"), ui=False)) as client:
        answer = client.post("/mutate", json=review(H100_POD)).json()["response"]
    assert answer["allowed"] is True
    patch = orjson.loads(base64.b64decode(answer["patch"]))
    assert any(op["path"].startswith("/spec/nodeSelector") or op["path"] == "/spec/affinity" for op in patch)


def test_audit_mode_returns_no_patch_but_says_what_it_would_do(audit_client: TestClient) -> None:
    before = would_mutate("accelerator")
    answer = audit_client.post("/mutate", json=review(H100_POD)).json()["response"]
    assert answer["allowed"] is True
    assert "patch" not in answer and "patchType" not in answer
    warnings = answer["warnings"]
    assert any(w.startswith("KGWE audit mode: would mutate (") and "accelerator" in w for w in warnings), answer
    assert "accelerator" in answer["auditAnnotations"]["would-mutate"]
    assert would_mutate("accelerator") == before + 1


def _validate(client: TestClient, pod: dict[str, Any]) -> dict[str, Any]:
    answer: dict[str, Any] = client.post("/validate", json=review(pod)).json()["response"]
    return answer


def test_audit_mode_admits_what_enforce_mode_denies(audit_client: TestClient) -> None:
    absent_type = copy.deepcopy(H100_POD)
    absent_type["metadata"]["annotations"]["kgwe.io/accelerator"] = "nvidia-v100-16gb"
    with TestClient(create_app(runtime_in("enforce"), ui=False)) as enforcing:
        denied = _validate(enforcing, absent_type)
    assert denied["allowed"] is False
    assert "nvidia-v100-16gb" in denied["status"]["message"]

    answer = _validate(audit_client, absent_type)
    assert answer["allowed"] is True
    assert any(w.startswith("KGWE audit mode: would deny: nvidia-v100-16gb") for w in answer["warnings"]), answer
    assert "nvidia-v100-16gb" in answer["auditAnnotations"]["would-deny"]


def test_audit_mode_records_deny_policies_as_audit(audit_client: TestClient) -> None:
    privileged = copy.deepcopy(H100_POD)
    privileged["spec"]["containers"][0]["securityContext"] = {"privileged": True}
    answer = _validate(audit_client, privileged)
    assert answer["allowed"] is True
    assert "privileged" in answer["auditAnnotations"]["policy-kgwe.admission.privileged"]
