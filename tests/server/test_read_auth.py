"""Issue 30: in a cluster the read API, the UI's data and /metrics need a Kubernetes identity.

`kgwe serve` over real HTTPS, its cluster from the fake API server, which also answers the TokenReviews and
SubjectAccessReviews KGWE asks (tests/cluster/kube_fake_apiserver.py): no token 401, a user who may list
pods only in team-a sees team-a only, /metrics without `get /metrics` 403, an API server that does not answer
the reviews fails closed (503) while /mutate keeps answering.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from kube_fake_apiserver import ACCESS_REVIEWS, TOKEN_REVIEWS, FakeApiServer, serving_cluster, write_kubeconfig
from server_support import CLUSTER, CONFIG, GPU_POD, ROOT, RunningServer, admission_review, free_port
from waiting import eventually

READ_PATHS = ["/api/v1/hardware-profiles", "/api/v1/nodes", "/api/v1/tenants", "/api/v1/costs", "/api/v1/gangs",
              "/api/v1/workloads", "/api/v1/explain", "/api/v1/hardware-profiles/proposal?type=nvidia-h100-80gb",
              "/metrics"]


def _pending_gang_member(namespace: str) -> dict[str, Any]:
    """A GPU pod not bound yet, member of a gang of two: on the gangs and the Why pages."""
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "gang-0", "namespace": namespace, "labels": {"kgwe.io/gang": "train"},
                     "annotations": {"kgwe.io/gang-size": "2"}},
        "spec": {"containers": [{"name": "main", "image": "cuda:12",
                                 "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
        "status": {"phase": "Pending"},
    }


def _gpu_deployment(namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "serving", "namespace": namespace},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "serving"}}, "template": {
            "metadata": {"labels": {"app": "serving"}},
            "spec": {"containers": [{"name": "main", "image": "cuda:12",
                                     "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}},
    }


@dataclass
class Serving:
    api: FakeApiServer
    server: RunningServer

    def get(self, path: str, token: str | None = None) -> httpx.Response:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        with self.server.client(timeout=30) as client:
            return client.get(path, headers=headers)


@pytest.fixture(scope="module")
def serving(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Serving]:
    tmp = tmp_path_factory.mktemp("read-auth")
    api = serving_cluster(CLUSTER)
    for namespace in ("team-a", "ml-research"):  # rows of two namespaces on every scoped page
        api.put("Pod", _pending_gang_member(namespace))
        api.put("Deployment", _gpu_deployment(namespace))
    api.add_user("alice-token", "alice", ["team-a"])
    api.allow("team-a", "list", "pods", namespace="team-a")  # a RoleBinding in team-a
    api.add_user("admin-token", "admin", ["platform"])
    api.allow("platform", "list", "pods")  # ClusterRoleBindings
    api.allow("platform", "list", "nodes")
    api.allow("platform", "get", url="/metrics")
    api.add_user("prometheus-token", "system:serviceaccount:monitoring:prometheus")
    api.allow("system:serviceaccount:monitoring:prometheus", "get", url="/metrics")
    api.add_user("nobody-token", "nobody")
    kubeconfig = write_kubeconfig(tmp / "kubeconfig", api.url)
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "KGWE_STATE_DIR": str(tmp / "state"),
           "KGWE_TEST_KUBECONFIG": str(kubeconfig), "POD_NAMESPACE": "kgwe"}
    command = [sys.executable, "-m", "webhook.cli", "serve", "--config", str(CONFIG),
               "--host", "127.0.0.1", "--port", str(port)]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env,
                               cwd=ROOT)
    try:
        assert process.stdout is not None
        ca_file = Path(process.stdout.readline().rsplit("CA: ", 1)[1].strip())
        server = RunningServer(f"https://127.0.0.1:{port}", ca_file, ca_file.parent, None)  # type: ignore[arg-type]
        deadline = time.monotonic() + 60
        while True:
            try:
                with server.client() as client:
                    if client.get("/readyz").status_code == 200:
                        break
            except httpx.TransportError:
                pass
            assert process.poll() is None, "kgwe serve exited"
            assert time.monotonic() < deadline, "kgwe serve never became ready"
            time.sleep(0.1)
        yield Serving(api, server)
    finally:
        process.terminate()
        process.wait(20)
        api.close()


@pytest.mark.parametrize("path", READ_PATHS)
def test_no_token_is_401_saying_what_is_needed(serving: Serving, path: str) -> None:
    answer = serving.get(path)
    assert answer.status_code == 401
    assert answer.headers["www-authenticate"].startswith("Bearer")
    assert "kubectl create token" in answer.json()["message"]


def test_a_token_the_api_server_rejects_is_401(serving: Serving) -> None:
    asked = len(serving.api.reviews(TOKEN_REVIEWS))
    assert serving.get("/api/v1/tenants", "made-up-token").status_code == 401
    assert len(serving.api.reviews(TOKEN_REVIEWS)) == asked + 1
    assert serving.get("/api/v1/tenants", "Bearer").status_code == 401


def test_probes_and_the_static_page_stay_open(serving: Serving) -> None:
    for path in ("/healthz", "/readyz", "/ui/", "/ui/app.js"):
        assert serving.get(path).status_code == 200, path


def test_a_team_a_reader_sees_team_a_only(serving: Serving) -> None:
    everything = serving.get("/api/v1/tenants", "admin-token").json()
    assert {t["tenant"] for t in everything["tenants"]} >= {"team-a", "ml-research"}

    tenants = serving.get("/api/v1/tenants", "alice-token")
    assert tenants.status_code == 200
    assert [t["tenant"] for t in tenants.json()["tenants"]] == ["team-a"]
    assert tenants.json()["tenants"][0]["namespaces"] == ["team-a"]

    costs = serving.get("/api/v1/costs", "alice-token").json()
    all_costs = serving.get("/api/v1/costs", "admin-token").json()
    assert {p["namespace"] for p in all_costs["pods"]} > {"team-a"}
    assert costs["pods"] and {p["namespace"] for p in costs["pods"]} == {"team-a"}
    assert {row["tenant"] for row in costs["rows"]} == {"team-a"}
    team_a_hourly = sum(float(p["hourlyCost"] or 0) for p in costs["pods"])
    assert float(costs["hourlyCost"]) == pytest.approx(team_a_hourly)

    for path, rows in (("/api/v1/gangs", "gangs"), ("/api/v1/workloads", "workloads")):
        answer = serving.get(path, "alice-token")
        assert answer.status_code == 200, path
        assert {row["namespace"] for row in answer.json()[rows]} == {"team-a"}, path
        assert {row["namespace"] for row in serving.get(path, "admin-token").json()[rows]} >= {"team-a", "ml-research"}
    pending = serving.get("/api/v1/explain", "alice-token").json()["pending"]
    assert pending == ["team-a/gang-0"]
    assert "ml-research/gang-0" in serving.get("/api/v1/explain", "admin-token").json()["pending"]
    assert serving.get("/api/v1/explain?pod=team-a/gang-0", "alice-token").status_code == 200

    other_pod = next(p for p in all_costs["pods"] if p["namespace"] != "team-a")
    refused = serving.get(f"/api/v1/explain?pod={other_pod['namespace']}/{other_pod['pod']}", "alice-token")
    assert refused.status_code == 403

    # The profile catalogue is any authenticated user's; node facts need `list nodes`.
    assert serving.get("/api/v1/hardware-profiles", "alice-token").status_code == 200
    assert serving.get("/api/v1/nodes", "alice-token").status_code == 403
    assert serving.get("/api/v1/nodes", "admin-token").status_code == 200
    assert serving.get("/api/v1/hardware-profiles/proposal?type=nvidia-h100-80gb", "alice-token").status_code == 403


def test_a_user_with_no_namespace_sees_no_tenant(serving: Serving) -> None:
    answer = serving.get("/api/v1/tenants", "nobody-token")
    assert answer.status_code == 200 and answer.json()["tenants"] == []
    assert serving.get("/api/v1/costs", "nobody-token").json()["pods"] == []


def test_metrics_need_get_on_the_metrics_url(serving: Serving) -> None:
    denied = serving.get("/metrics", "alice-token")
    assert denied.status_code == 403
    assert "/metrics" in denied.json()["message"]
    scraped = serving.get("/metrics", "prometheus-token")
    assert scraped.status_code == 200 and "kgwe_admission_requests_total" in scraped.text
    asked = [r.body["spec"] for r in serving.api.reviews(ACCESS_REVIEWS)
             if r.body["spec"].get("user") == "system:serviceaccount:monitoring:prometheus"]
    assert {"path": "/metrics", "verb": "get"} in [s.get("nonResourceAttributes") for s in asked]
    assert serving.get("/api/v1/nodes", "prometheus-token").status_code == 403


def test_answers_are_cached_briefly_by_token(serving: Serving) -> None:
    serving.api.add_user("cached-token", "carol", ["team-a"])
    before = len(serving.api.reviews(TOKEN_REVIEWS))
    for _ in range(3):
        assert serving.get("/api/v1/tenants", "cached-token").status_code == 200
    assert len(serving.api.reviews(TOKEN_REVIEWS)) == before + 1


def test_an_unanswered_token_review_fails_closed(serving: Serving) -> None:
    serving.api.add_user("down-token", "dave", ["team-a"])
    serving.api.fail_next(TOKEN_REVIEWS, 503)
    answer = serving.get("/api/v1/tenants", "down-token")
    assert answer.status_code == 503 and "TokenReview" in answer.json()["message"]
    assert "down-token" not in answer.text
    # The next try asks again: a failure is not remembered as an answer.
    assert serving.get("/api/v1/tenants", "down-token").status_code == 200


def test_an_unanswered_access_review_fails_closed(serving: Serving) -> None:
    serving.api.add_user("sar-down-token", "erin", ["team-a"])
    assert serving.get("/api/v1/hardware-profiles", "sar-down-token").status_code == 200  # token now cached
    serving.api.fail_next(ACCESS_REVIEWS, 500)
    assert serving.get("/metrics", "sar-down-token").status_code == 503


def test_a_slow_token_review_is_bounded_and_admission_keeps_answering(serving: Serving) -> None:
    # The TokenReview takes 20 s, four times the read's bound (read_auth.TIMEOUT_SECONDS, 5 s): the read is
    # refused at its bound, and /mutate, sent while the read waits, is answered before the read is (had it
    # queued behind the review, it would come after). Orders and a wide margin, no tight clock.
    serving.api.add_user("slow-token", "frank", ["team-a"])
    serving.api.delays[TOKEN_REVIEWS] = 20.0
    found: dict[str, Any] = {}

    def read() -> None:
        started = time.monotonic()
        found["status"] = serving.get("/api/v1/tenants", "slow-token").status_code
        found["seconds"] = time.monotonic() - started

    def slow_reviews_asked() -> int:
        return sum(1 for r in serving.api.reviews(TOKEN_REVIEWS) if (r.body or {}).get("spec", {}).get("token")
                   == "slow-token")

    reader = threading.Thread(target=read)
    try:
        reader.start()
        # The read is waiting on the TokenReview once the API server has it: a fixed sleep sent /mutate before
        # the read had asked whenever a busy machine ran the reader late, and the order proved nothing.
        eventually(lambda: slow_reviews_asked() >= 1, what="the read's TokenReview asked")
        with serving.server.client(timeout=30) as client:
            review = client.post("/mutate", json=admission_review(GPU_POD))
        read_done_first = "status" in found
        assert review.status_code == 200 and review.json()["response"]["allowed"] is True
        assert not read_done_first, "/mutate was answered only after the slow TokenReview's read"
        reader.join(60)
    finally:
        serving.api.delays.pop(TOKEN_REVIEWS, None)
    assert found["status"] == 503
    assert found["seconds"] < 15, "the read waited for the API server past its bound"


def test_the_fake_api_server_refuses_what_the_real_one_refuses(serving: Serving) -> None:
    with httpx.Client(base_url=serving.api.url) as client:
        no_token = client.post(TOKEN_REVIEWS, json={"kind": "TokenReview", "spec": {"token": ""}})
        assert no_token.status_code == 400 and "token is required" in no_token.json()["message"]
        both = {"kind": "SubjectAccessReview", "spec": {"user": "a", "resourceAttributes": {"verb": "list"},
                                                        "nonResourceAttributes": {"path": "/metrics", "verb": "get"}}}
        assert client.post(ACCESS_REVIEWS, json=both).status_code == 422
        nobody = {"kind": "SubjectAccessReview", "spec": {"resourceAttributes": {"verb": "list", "resource": "pods"}}}
        assert client.post(ACCESS_REVIEWS, json=nobody).status_code == 422
