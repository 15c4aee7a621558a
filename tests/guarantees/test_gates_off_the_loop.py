"""Issue 13 item 11: a SubjectAccessReview that waits on a slow API server stalls only the request that
needs it; every other admission of the same worker is answered meanwhile."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fault_support import ReviewServer
from guarantees_support import CLUSTER, CONFIG, gpu_pod, review, serve
from kubernetes import client as k8s_client

from policies.kernel.kube_client import deadline_api_client
from policies.rbac.review import SubjectAccessReviewer
from webhook.assembly import build_runtime
from webhook.config import load_config


@pytest.fixture
def release() -> Iterator[threading.Event]:
    event = threading.Event()
    yield event
    event.set()


@pytest.fixture
def held(release: threading.Event) -> Iterator[ReviewServer]:
    """SubjectAccessReviews answered `allowed` only once `release` is set."""
    yield from ReviewServer(lambda: release.wait(20)).running()


def test_a_slow_rbac_check_does_not_stall_other_admissions(
    held: ReviewServer, release: threading.Event, tmp_path: Path
) -> None:
    def runtime():  # type: ignore[no-untyped-def]
        api = k8s_client.AuthorizationV1Api(deadline_api_client(k8s_client.Configuration(host=held.url)))
        # The held review's deadline must outlast the plain requests, or the held one is answered (refused at
        # its deadline) first: 2.5 s, the example's, left that to a busy machine. It costs nothing: the test
        # releases the review as soon as the plain request is answered.
        config = load_config(CONFIG)
        config = config.model_copy(update={"limits": config.limits.model_copy(update={"deadline_seconds": 30.0})})
        return build_runtime(config, CLUSTER, authorizer=SubjectAccessReviewer(api, cache_seconds=0))

    order: list[str] = []
    for webhook in serve(runtime, tmp_path):
        profile_pod = webhook.mutate(gpu_pod("premium", annotations={"kgwe.io/profile": "premium-h100"}))[1]

        def ask_slow(hook: Any = webhook, pod: dict[str, Any] = profile_pod) -> None:
            hook.ask("validate", review(pod), timeout="20s")
            order.append("slow")

        slow = threading.Thread(target=ask_slow)
        slow.start()
        assert held.asked.wait(10), "the SubjectAccessReview was asked"
        # While that review waits, the same worker answers a request that needs no review.
        plain = webhook.mutate(gpu_pod("plain", annotations={"kgwe.io/accelerator": "nvidia-h100-80gb"}))[1]
        answer = webhook.ask("validate", review(plain))
        order.append("plain")
        assert answer["allowed"] is True
        release.set()
        slow.join(20)
        assert order == ["plain", "slow"]
