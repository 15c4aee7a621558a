"""The in-cluster authorizer: SubjectAccessReviews over HTTP to an endpoint on 127.0.0.1 that answers them
with RBAC evaluated from the example cluster's objects."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from policies.kernel.kube_client import deadline_api_client
from policies.rbac.evaluator import AuthorizationUnavailable, RbacEvaluator
from policies.rbac.review import SubjectAccessReviewer

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "cluster"
SAR_PATH = "/apis/authorization.k8s.io/v1/subjectaccessreviews"


class ReviewEndpoint:
    def __init__(self) -> None:
        self.reviews: list[dict[str, Any]] = []
        self.delay_seconds = 0.0
        self.fail_with: int | None = None
        evaluator = RbacEvaluator(d for d in yaml.safe_load_all((EXAMPLES / "rbac.yaml").read_text()) if d)
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                endpoint.reviews.append(body)
                time.sleep(endpoint.delay_seconds)
                if self.path.split("?")[0] != SAR_PATH or endpoint.fail_with:
                    code = endpoint.fail_with or 404
                    answer: dict[str, Any] = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code}
                else:
                    spec = body["spec"]
                    attributes = spec["resourceAttributes"]
                    allowed = evaluator.allowed(
                        {"username": spec.get("user"), "groups": spec.get("groups")},
                        attributes["verb"], attributes["group"], attributes["resource"],
                        attributes.get("name", ""), attributes.get("namespace", ""),
                    )
                    code = 201
                    answer = {**body, "status": {"allowed": allowed}}
                data = json.dumps(answer).encode()
                try:
                    self.send_response(code)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (the deadline test)

        ThreadingHTTPServer.request_queue_size = 256  # many admissions connect at once
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True  # a reply still sleeping after a timed-out review must not hold shutdown
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def api(self) -> client.AuthorizationV1Api:
        return client.AuthorizationV1Api(deadline_api_client(client.Configuration(host=self.url)))


@pytest.fixture
def endpoint() -> Iterator[ReviewEndpoint]:
    endpoint = ReviewEndpoint()
    thread = threading.Thread(target=endpoint.server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield endpoint
    endpoint.server.shutdown()
    endpoint.server.server_close()


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


ALICE = {
    "username": "alice",
    "uid": "4f2a-alice",
    "groups": ["system:authenticated", "ml-researchers"],
    "extra": {"scopes.authorization.openshift.io": ["user:full"], "authentication.kubernetes.io/credential-id": ["x"]},
}


def test_review_carries_the_full_user_info_and_resource(endpoint: ReviewEndpoint) -> None:
    reviewer = SubjectAccessReviewer(endpoint.api())
    assert reviewer.can_use(ALICE, "hardwareprofiles", "nvl72", "ml-research", deadline=time.monotonic() + 5)
    [review] = endpoint.reviews
    assert review["apiVersion"] == "authorization.k8s.io/v1" and review["kind"] == "SubjectAccessReview"
    spec = review["spec"]
    assert spec["user"] == "alice"
    assert spec["uid"] == "4f2a-alice"
    assert sorted(spec["groups"]) == ["ml-researchers", "system:authenticated"]
    assert spec["extra"] == ALICE["extra"]
    assert spec["resourceAttributes"] == {
        "group": "kgwe.io", "resource": "hardwareprofiles", "name": "nvl72", "namespace": "ml-research", "verb": "use",
    }


def test_refusal_from_the_api_server(endpoint: ReviewEndpoint) -> None:
    reviewer = SubjectAccessReviewer(endpoint.api())
    bob = {"username": "bob", "uid": "b", "groups": ["system:authenticated"], "extra": {}}
    assert not reviewer.can_use(bob, "hardwareprofiles", "nvl72", "ml-research")
    assert reviewer.can_use(bob, "acceleratortypes", "nvidia-h100-80gb", "team-a")


def test_answers_are_cached_for_the_configured_seconds(endpoint: ReviewEndpoint) -> None:
    clock = Clock()
    reviewer = SubjectAccessReviewer(endpoint.api(), cache_seconds=5, clock=clock)
    for _ in range(3):
        assert reviewer.can_use(ALICE, "hardwareprofiles", "nvl72", "ml-research")
    assert len(endpoint.reviews) == 1
    # Another question, or the same user with other groups, is not answered from the cache.
    reviewer.can_use(ALICE, "hardwareprofiles", "nvl72", "team-a")
    reviewer.can_use({**ALICE, "groups": ["system:authenticated"]}, "hardwareprofiles", "nvl72", "ml-research")
    assert len(endpoint.reviews) == 3
    clock.now += 5.5
    reviewer.can_use(ALICE, "hardwareprofiles", "nvl72", "ml-research")
    assert len(endpoint.reviews) == 4


def test_api_failure_raises_authorization_unavailable(endpoint: ReviewEndpoint) -> None:
    endpoint.fail_with = 500
    reviewer = SubjectAccessReviewer(endpoint.api())
    with pytest.raises(AuthorizationUnavailable):
        reviewer.can_use(ALICE, "hardwareprofiles", "nvl72", "ml-research")


def test_deadline_bounds_the_review(endpoint: ReviewEndpoint) -> None:
    endpoint.delay_seconds = 1.0
    reviewer = SubjectAccessReviewer(endpoint.api())
    with pytest.raises(AuthorizationUnavailable):
        reviewer.can_use(ALICE, "hardwareprofiles", "nvl72", "ml-research", deadline=time.monotonic() + 0.2)
    with pytest.raises(AuthorizationUnavailable):
        reviewer.can_use(ALICE, "hardwareprofiles", "nvl72", "ml-research", deadline=time.monotonic() - 1)


def test_asked_not_to_wait_it_answers_from_the_cache_only(endpoint: ReviewEndpoint) -> None:
    """The event loop asks first with wait=False: a cached answer costs no thread and no request; a
    question not asked yet is refused to it with WouldBlock, without a review being sent."""
    from policies.api import WouldBlock

    reviewer = SubjectAccessReviewer(endpoint.api(), cache_seconds=60)
    with pytest.raises(WouldBlock):
        reviewer.can_use(ALICE, "hardwareprofiles", "nvl72", "ml-research", wait=False)
    assert endpoint.reviews == []
    assert reviewer.can_use(ALICE, "hardwareprofiles", "nvl72", "ml-research")
    assert reviewer.can_use(ALICE, "hardwareprofiles", "nvl72", "ml-research", wait=False)
    assert len(endpoint.reviews) == 1
