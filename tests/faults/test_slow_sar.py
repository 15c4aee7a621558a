"""The API server's SubjectAccessReview answers slowly: the admission deadline holds (the answer comes before the
review would have), and the configured failure behaviour (`limits.onError`) decides the pod's fate."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from fault_support import CLUSTER, Webhook
from kubernetes import client as k8s_client

from policies.kube_client import deadline_api_client
from policies.rbac.review import SubjectAccessReviewer
from webhook.config import Config
from webhook.runtime import build_runtime

SAR_DELAY_SECONDS = 5.0
DEADLINE_SECONDS = 0.4
PROFILE_POD: dict[str, Any] = {
    "apiVersion": "v1", "kind": "Pod",
    "metadata": {"name": "premium-job", "namespace": "team-a", "annotations": {"kgwe.io/profile": "premium-h100"}},
    "spec": {"containers": [{"name": "trainer", "image": "nvcr.io/nvidia/pytorch:24.05-py3",
                             "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
}


class SlowReviews:
    """SubjectAccessReviews answered `allowed` after SAR_DELAY_SECONDS, on 127.0.0.1."""

    def __init__(self) -> None:
        self.received = 0
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                owner.received += 1
                time.sleep(SAR_DELAY_SECONDS)
                data = json.dumps({**body, "status": {"allowed": True}}).encode()
                try:
                    self.send_response(201)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the webhook stopped waiting, as it should

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"


@pytest.fixture
def slow_reviews() -> Iterator[SlowReviews]:
    reviews = SlowReviews()
    thread = threading.Thread(target=reviews.server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield reviews
    reviews.server.shutdown()
    reviews.server.server_close()


@pytest.mark.parametrize("on_error", ["deny", "allow"])
def test_deadline_holds_and_the_failure_behaviour_applies(slow_reviews: SlowReviews, on_error: str) -> None:
    config = Config.model_validate({"limits": {"deadlineSeconds": DEADLINE_SECONDS, "onError": on_error}})
    api = k8s_client.AuthorizationV1Api(deadline_api_client(k8s_client.Configuration(host=slow_reviews.url)))
    runtime = build_runtime(config, CLUSTER, authorizer=SubjectAccessReviewer(api, cache_seconds=0))
    webhook = Webhook(runtime)
    _response, placed = webhook.mutated(PROFILE_POD)

    started = time.monotonic()
    validated = webhook.ask("validate", placed, timeout="10s")
    elapsed = time.monotonic() - started

    assert slow_reviews.received == 1, "the SubjectAccessReview was asked"
    # Not a speed assertion: the review would have taken SAR_DELAY_SECONDS; the deadline cut it short.
    assert elapsed < SAR_DELAY_SECONDS / 2
    # An RBAC check that cannot answer never admits a GPU pod, whatever onError says (it is for /mutate).
    assert not validated["allowed"]
    message = validated["status"]["message"]
    assert ("could not check RBAC for hardwareprofiles.kgwe.io/premium-h100" in message
            or "the RBAC check did not answer in time" in message)
