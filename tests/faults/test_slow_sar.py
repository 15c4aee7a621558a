"""The API server's SubjectAccessReview answers slowly: the admission deadline holds (the answer comes before the
review would have), and the configured failure behaviour (`limits.onError`) decides the pod's fate."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from fault_support import CLUSTER, ReviewServer, Webhook
from kubernetes import client as k8s_client

from policies.kernel.kube_client import deadline_api_client
from policies.rbac.review import SubjectAccessReviewer
from webhook.assembly import build_runtime
from webhook.config import Config

SAR_DELAY_SECONDS = 30.0  # thirty deadlines: a busy machine cannot make the cut look like an answer
# Long enough that a busy machine still sends the review before the deadline cuts the admission short.
DEADLINE_SECONDS = 1.0
PROFILE_POD: dict[str, Any] = {
    "apiVersion": "v1", "kind": "Pod",
    "metadata": {"name": "premium-job", "namespace": "team-a", "annotations": {"kgwe.io/profile": "premium-h100"}},
    "spec": {"containers": [{"name": "trainer", "image": "nvcr.io/nvidia/pytorch:24.05-py3",
                             "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
}


@pytest.fixture
def slow_reviews() -> Iterator[ReviewServer]:
    """SubjectAccessReviews answered `allowed` after SAR_DELAY_SECONDS."""
    yield from ReviewServer(lambda: time.sleep(SAR_DELAY_SECONDS)).running()


@pytest.mark.parametrize("on_error", ["deny", "allow"])
def test_deadline_holds_and_the_failure_behaviour_applies(slow_reviews: ReviewServer, on_error: str) -> None:
    config = Config.model_validate({"limits": {"deadlineSeconds": DEADLINE_SECONDS, "onError": on_error}})
    api = k8s_client.AuthorizationV1Api(deadline_api_client(k8s_client.Configuration(host=slow_reviews.url)))
    runtime = build_runtime(config, CLUSTER, authorizer=SubjectAccessReviewer(api, cache_seconds=0))
    webhook = Webhook(runtime)
    _response, placed = webhook.mutated(PROFILE_POD)

    started = time.monotonic()
    validated = webhook.ask("validate", placed, timeout="10s")
    elapsed = time.monotonic() - started

    # The review server counts a request once its thread has read it, which a busy machine may schedule after
    # the webhook has already answered at its deadline.
    assert slow_reviews.asked.wait(10), "the SubjectAccessReview was asked"
    assert slow_reviews.received == 1
    # Not a speed assertion: the review would have taken SAR_DELAY_SECONDS; the deadline cut it short.
    assert elapsed < SAR_DELAY_SECONDS / 2  # the deadline (1 s), with a wide margin for a busy machine
    # An RBAC check that cannot answer never admits a GPU pod, whatever onError says (it is for /mutate).
    assert not validated["allowed"]
    message = validated["status"]["message"]
    assert ("could not check RBAC for hardwareprofiles.kgwe.io/premium-h100" in message
            or "the RBAC check did not answer in time" in message)
