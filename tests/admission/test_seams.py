"""The admission seams (webhook/admission/seams.py): a gate or a kind registered next to the wings' is asked
on the real request path (real AdmissionReviews through `review_pod`), and the assembly registers every wing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from webhook.admission.facts import Facts, Problem
from webhook.admission.outcome import Outcome
from webhook.admission.request import AdmissionRequest
from webhook.admission.seams import AdmissionGate, PendingVerdict, PodFlow
from webhook.assembly import build_runtime
from webhook.config import load_config
from webhook.dra.gate import ClaimGate
from webhook.gangs.admission import GangGate
from webhook.quotas.gate import QuotaGate
from webhook.rbac.gate import RbacGate
from webhook.review import review_pod
from webhook.runtime import Runtime
from webhook.workload_kinds import KindSpec, KindTable, TemplatePath

ROOT = Path(__file__).resolve().parents[2]
WIDGET = KindSpec("example.com", "Widget", "widgets", ("v1",), (TemplatePath.parse("spec.template"),))


def gpu_pod(namespace: str, name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace},
        "spec": {"containers": [{"name": "main", "image": "cuda", "resources": {"limits": {"nvidia.com/gpu": 1}}}]},
    }


class FrozenGate(AdmissionGate):
    """The example of docs/architecture.md: no new GPU pods in one namespace."""

    def advise(self, request: AdmissionRequest, facts: Facts) -> tuple[list[Problem], list[str]]:
        frozen = request.namespace == "team-a"
        return ([("frozen", "this namespace takes no new GPU pods")] if frozen and facts.plan.gpu_pod else []), []


class WidgetKind:
    """A kind handler that refuses every Widget and leaves its mutation to the pod flow (a passthrough)."""

    def judges(self, request: AdmissionRequest) -> bool:
        return request.kind.get("group") == "example.com" and request.kind.get("kind") == "Widget"

    def mutate(self, request: AdmissionRequest, deadline: float | None, pods: PodFlow) -> Outcome:
        return pods.mutate_pod(request, deadline)

    def prepare_verdict(
        self, request: AdmissionRequest, deadline: float | None, pods: PodFlow
    ) -> Outcome | PendingVerdict:
        return Outcome.deny("widgets are not admitted here", code=403, reason="Forbidden")


@pytest.fixture
def runtime() -> Runtime:
    return build_runtime(load_config(ROOT / "examples" / "config.yaml"), ROOT / "examples" / "cluster")


def test_the_assembly_registers_every_wing_in_order(runtime: Runtime) -> None:
    gates = runtime.admission.seams.gates
    assert [type(g) for g in gates] == [ClaimGate, RbacGate, QuotaGate, GangGate]
    assert len(runtime.admission.seams.kinds) == 2 and len(runtime.admission.seams.after) == 2


def test_a_registered_gate_refuses_on_the_request_path(runtime: Runtime) -> None:
    assert review_pod(runtime.admission, gpu_pod("team-a", "a"), "alice", ["team-a"]).allowed
    runtime.admission.seams.gates.append(FrozenGate())  # the one registration line
    refused = review_pod(runtime.admission, gpu_pod("team-a", "b"), "alice", ["team-a"])
    assert not refused.allowed and "this namespace takes no new GPU pods" in refused.message
    assert review_pod(runtime.admission, gpu_pod("ml-research", "c"), "carol").allowed


def test_a_registered_kind_answers_its_objects(runtime: Runtime) -> None:
    runtime.admission.seams.kinds.append(WidgetKind())
    widget = {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w", "namespace": "team-a"},
              "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "x"}]}}}}
    refused = review_pod(runtime.admission, widget, "alice", ["team-a"], kinds=KindTable.build([WIDGET]))
    assert not refused.allowed and refused.message == "widgets are not admitted here"
