"""AdmissionReviews shaped as the API server sends them, and both webhooks chained as it chains them."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import jsonpatch
import pytest
import yaml

from webhook.admission.outcome import Outcome
from webhook.admission.request import decode_review
from webhook.assembly import build_runtime
from webhook.config import load_config
from webhook.runtime import Runtime
from webhook.scheduling.predicates import feasible_nodes

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"


def review(
    pod: dict[str, Any],
    *,
    operation: str = "CREATE",
    old: dict[str, Any] | None = None,
    user: str = "alice",
    groups: tuple[str, ...] = ("system:authenticated",),
    dry_run: bool = False,
) -> dict[str, Any]:
    namespace = (pod.get("metadata") or {}).get("namespace") or "default"
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": str(uuid.uuid4()),
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "requestKind": {"group": "", "version": "v1", "kind": "Pod"},
            "requestResource": {"group": "", "version": "v1", "resource": "pods"},
            "name": (pod.get("metadata") or {}).get("name", ""),
            "namespace": namespace,
            "operation": operation,
            "userInfo": {
                "username": user,
                "uid": "0b1c7e2a-1111-4c3b-9a55-2f1d9b0e7d11",
                "groups": list(groups),
                "extra": {"authentication.kubernetes.io/credential-id": ["X509SHA256=abc"]},
            },
            "object": pod,
            "oldObject": old,
            "dryRun": dry_run,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"},
        },
    }


class Admit:
    """Both webhooks, as the API server chains them: mutate, apply the patch, validate the result."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime

    def mutate(self, pod: dict[str, Any], **kw: Any) -> Outcome:
        return self.runtime.admission.mutate(decode_review(review(pod, **kw)))

    def validate(self, pod: dict[str, Any], **kw: Any) -> Outcome:
        return self.runtime.admission.validate(decode_review(review(pod, **kw)))

    def create(self, pod: dict[str, Any], **kw: Any) -> tuple[dict[str, Any], Outcome, Outcome]:
        mutated = self.mutate(pod, **kw)
        final = jsonpatch.apply_patch(pod, mutated.patch) if mutated.patch else pod
        return final, mutated, self.validate(final, **kw)

    def landing_nodes(self, pod: dict[str, Any]) -> set[str]:
        model = self.runtime.store.snapshot()
        return set(feasible_nodes(pod, model.nodes.values()))


def load_pod(name: str) -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((EXAMPLES / "pods" / name).read_text())
    return data


@pytest.fixture(scope="session")
def runtime() -> Runtime:
    """The example cluster and configuration loaded into a runtime, once per session."""
    return build_runtime(load_config(EXAMPLES / "config.yaml"), EXAMPLES / "cluster")


@pytest.fixture(scope="session")
def admit(runtime: Runtime) -> Admit:
    return Admit(runtime)
