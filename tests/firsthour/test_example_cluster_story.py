"""The example cluster tells the story of a first run (issue 35): a pod waiting for capacity, one waiting for its
tenant's quota, a gang waiting for an NVLink clique with room, a workload KGWE would refuse. Each object is valid
Kubernetes, and what the files say of it (its KGWE outputs, its conditions) is what KGWE's own code says of the
cluster: the explanation, the quota queue, the gang plan, the audit and the read-only API behind the UI's pages.
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
from cluster_dirs import EXAMPLE_CLUSTER, EXAMPLE_CONFIG, ROOT
from fastapi import FastAPI
from fastapi.testclient import TestClient
from manifests import manifests

from webhook.assembly import build_runtime
from webhook.cli import main
from webhook.config import load_config
from webhook.quotas.view import why_waiting
from webhook.review import review_pod
from webhook.runtime import Runtime
from webhook.server.api_routes import api_router
from webhook.server.explain_routes import explain_router
from webhook.server.gang_routes import gangs_router
from webhook.server.workloads_routes import workloads_router

EXAMPLES = ROOT / "examples"
# Kinds of CRDs that Kubernetes' own schemas do not hold: KGWE's (tests/chart/test_chart_crds.py checks them
# against the chart's CRDs) and the training operators' (examples/workloads).
NOT_BUILT_IN = ("kgwe.io/", "jobset.x-k8s.io/", "leaderworkerset.x-k8s.io/", "kubeflow.org/", "ray.io/")
WAITING = {"ml-research/waiting", "ml-research/sweep-0", "ml-research/moe-train-0", "ml-research/moe-train-1"}
# What KGWE writes into a pod at admission; what is left is what its creator wrote.
OUTPUT_ANNOTATIONS = ("kgwe.io/accelerator-type", "kgwe.io/hourly-cost", "kgwe.io/tenant", "kgwe.io/decision")
OUTPUT_SPEC = ("nodeSelector", "affinity", "tolerations", "schedulingGates")


def _documents(*directories: Path) -> Iterator[tuple[Path, dict[str, Any]]]:
    return manifests(*directories)


BUILT_IN = [(path, doc) for path, doc in _documents(*(EXAMPLES / d for d in ("cluster", "cluster-dra", "pods",
                                                                                "workloads")))
            if not str(doc.get("apiVersion", "")).startswith(NOT_BUILT_IN)]


@pytest.mark.parametrize(("path", "obj"), BUILT_IN,
                         ids=[f"{p.parent.name}/{p.name}:{d['kind']}/{d['metadata']['name']}" for p, d in BUILT_IN])
def test_every_example_object_of_a_built_in_kind_is_valid_kubernetes(path: Path, obj: dict[str, Any]) -> None:
    kubernetes_validate.validate(obj, kubernetes_validate.latest_version(), strict=True)


@pytest.fixture(scope="module")
def runtime() -> Runtime:
    return build_runtime(load_config(EXAMPLE_CONFIG), EXAMPLE_CLUSTER)


@pytest.fixture(scope="module")
def client(runtime: Runtime) -> Iterator[TestClient]:
    app = FastAPI()
    for router in (api_router(runtime), explain_router(runtime), gangs_router(runtime), workloads_router(runtime)):
        app.include_router(router)
    with TestClient(app) as test_client:
        yield test_client


def _pods() -> dict[str, dict[str, Any]]:
    return {f"{d['metadata']['namespace']}/{d['metadata']['name']}": d
            for _path, d in _documents(EXAMPLE_CLUSTER) if d["kind"] == "Pod"}


def _explain(target: str) -> dict[str, Any]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["explain", target, "--cluster", "examples/cluster", "-o", "json"]) == 0
    return dict(json.loads(out.getvalue()))


@pytest.fixture(autouse=True)
def _at_the_root(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(ROOT)  # the commands as documented, with the relative paths of the docs
    monkeypatch.setenv("KGWE_STATE_DIR", str(tmp_path / "state"))


def test_the_waiting_pods_are_what_kgwe_would_admit_today(runtime: Runtime) -> None:
    """Each waiting pod carries what /mutate writes for what its creator wrote; KGWE's controllers have only
    taken gates off since (the quota gate of the pods their quota released)."""
    pods = _pods()
    for key in sorted(WAITING):
        pod = pods[key]
        asked = copy.deepcopy(pod)
        asked.pop("status")
        for name in OUTPUT_ANNOTATIONS:
            asked["metadata"]["annotations"].pop(name)
        asked["metadata"]["labels"].pop("kgwe.io/gang", None)
        for name in OUTPUT_SPEC:
            asked["spec"].pop(name, None)
        answer = review_pod(runtime.admission, asked)
        assert answer.allowed, (key, answer.message)
        admitted = answer.object
        assert admitted["metadata"]["annotations"] == pod["metadata"]["annotations"], key
        assert admitted["metadata"]["labels"] == pod["metadata"]["labels"], key
        gates = admitted["spec"].pop("schedulingGates")
        left = pod["spec"].get("schedulingGates", [])
        assert [g for g in left if g not in gates] == [], key
        assert admitted["spec"] == {k: v for k, v in pod["spec"].items() if k != "schedulingGates"}, key


def test_a_pod_waits_for_capacity_and_the_scheduler_says_what_kgwe_sees(runtime: Runtime) -> None:
    body = _explain("ml-research/waiting")
    assert body["state"] == "pending" and not body["refusals"]
    said, model_says = body["blocking"]
    # The condition written in the file is the one kube-scheduler would write for this cluster: every node but the
    # H100 nodes fails the pod's node selector, and neither H100 node has 8 GPUs free.
    model = runtime.store.snapshot()
    h100 = len(model.types["nvidia-h100-80gb"].nodes)
    others = len(model.nodes) - h100
    assert said == (
        f"the scheduler says (Unschedulable): 0/{len(model.nodes)} nodes are available: {others} node(s) didn't "
        f"match Pod's node affinity/selector, {h100} Insufficient nvidia.com/gpu. preemption: 0/{len(model.nodes)} "
        f"nodes are available: {others} Preemption is not helpful for scheduling, {h100} No preemption victims "
        "found for incoming pod."
    )
    assert model_says.startswith(f"no node can run it now: of nvidia-h100-80gb, {h100} nodes have too little "
                                 "nvidia.com/gpu (asks 8)")


def test_a_pod_waits_for_its_tenants_quota_only(runtime: Runtime) -> None:
    pod = _pods()["ml-research/sweep-0"]
    [condition] = [c for c in pod["status"]["conditions"] if c["type"] == "kgwe.io/QuotaAvailable"]
    why = why_waiting(runtime.store.snapshot(), runtime.config, "ml-research/sweep-0")
    assert why == "ml-research: nvidia-gb200-186gb 14 of 16 GPUs in use; this pod asks 4; 1st in line"
    assert (condition["status"], condition["reason"], condition["message"]) == ("False", "WaitingForQuota", why)
    # Only the quota: a node has room for it now, and the API server's SchedulingGated is not repeated.
    assert _explain("ml-research/sweep-0")["blocking"] == [f"waits for its tenant's quota (gate kgwe.io/quota): {why}"]


def test_a_whole_gang_waits_for_a_clique_with_room(client: TestClient) -> None:
    [gang] = client.get("/api/v1/gangs").json()["gangs"]
    assert (gang["namespace"], gang["gang"], gang["size"], gang["present"], gang["gated"], gang["bound"]) == (
        "ml-research", "moe-train", 2, 2, 2, 0)
    assert gang["state"] == "Waiting" and gang["shortGPUs"] == 4
    assert gang["reason"].startswith("no NVLink room has 8 GPUs free; the closest, ")
    for member in ("moe-train-0", "moe-train-1"):
        [line] = _explain(f"ml-research/{member}")["blocking"]
        assert line == f"waits with its gang (gate kgwe.io/gang): gang moe-train, 2 of 2 pods: {gang['reason']}"


def test_the_tenants_page_shows_the_quota_held_and_who_waits(client: TestClient) -> None:
    research = next(t for t in client.get("/api/v1/tenants").json()["tenants"] if t["tenant"] == "ml-research")
    used = {limit["name"]: (limit["used"], limit["gpus"]) for limit in research["limits"]}
    # H100: ml-research/waiting (released, waiting for a node); GB200: rl-rollout-0 4, eval-0 2, the gang 8.
    assert used == {"nvidia-h100-80gb": (8, 16), "nvidia-gb200-186gb": (14, 16), "premium-h100": (0, 12)}
    assert [row["pod"] for row in research["waiting"]["pending"]] == ["ml-research/sweep-0"]
    assert research["pendingPods"] == 4


def test_the_why_page_lists_every_waiting_pod(client: TestClient) -> None:
    assert set(client.get("/api/v1/explain").json()["pending"]) == WAITING


def test_a_workload_is_refused_in_the_audit_and_on_the_workloads_page(client: TestClient) -> None:
    body = client.get("/api/v1/workloads").json()
    verdicts = {w["name"]: (w["admitted"], w["reason"]) for w in body["workloads"]}
    assert body["refused"] == 1 and verdicts["llm-serving"] == (True, "")
    admitted, reason = verdicts["chat-h200"]
    assert not admitted and reason.startswith("spec.template: nvidia-h200-141gb: no such GPUs")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["audit", "--cluster", "examples/cluster", "--exit-code"]) == 1  # a failing finding
    assert "Deployment/chat-h200" in out.getvalue()
