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

from policies.kube_client import deadline_api_client
from policies.rbac.review import SubjectAccessReviewer
from webhook.config import load_config
from webhook.runtime import build_runtime


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
        return build_runtime(load_config(CONFIG), CLUSTER, authorizer=SubjectAccessReviewer(api, cache_seconds=0))

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


def test_a_quota_lock_held_by_another_worker_is_waited_for_off_the_loop(tmp_path: Path) -> None:
    """With the workers' shared quota file: a free lock is taken on the event loop (no gate thread); a
    lock another worker holds is waited for on a gate thread, and the answer still reserves the pod."""
    import fcntl

    from policies.quota.file_store import FileQuotaStore

    state = tmp_path / "quota-state.json"

    def runtime():  # type: ignore[no-untyped-def]
        return build_runtime(load_config(CONFIG), CLUSTER, quota_store=FileQuotaStore(state, durable=False))

    def gate_threads() -> int:
        return sum(1 for t in threading.enumerate() if t.name.startswith("kgwe-gate"))

    before = gate_threads()
    for webhook in serve(runtime, tmp_path):
        first = webhook.mutate(gpu_pod("first", annotations={"kgwe.io/accelerator": "nvidia-h100-80gb"}))[1]
        assert webhook.ask("validate", review(first))["allowed"] is True
        assert gate_threads() == before  # answered on the event loop

        second = webhook.mutate(gpu_pod("second", annotations={"kgwe.io/accelerator": "nvidia-h100-80gb"}))[1]
        answers: list[dict[str, Any]] = []
        with open(str(state) + ".lock", "a+b") as other_worker:
            fcntl.flock(other_worker, fcntl.LOCK_EX)
            def ask(hook: Any = webhook, pod: dict[str, Any] = second, into: list[Any] = answers) -> None:
                into.append(hook.ask("validate", review(pod)))

            asking = threading.Thread(target=ask)
            asking.start()
            asking.join(0.5)
            assert answers == []  # waiting for the lock, on a thread
            fcntl.flock(other_worker, fcntl.LOCK_UN)
            asking.join(20)
        assert answers and answers[0]["allowed"] is True
        assert gate_threads() > before
        reserved = FileQuotaStore(state).read("team-a").status.reservations
        assert {r.pod for r in reserved} >= {"team-a/first", "team-a/second"}
