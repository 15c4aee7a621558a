"""Hypothesis over AdmissionReview bodies and pod specs, through the real app (HTTP shell, admission core,
policies, over ASGI): no 5xx, no exception escaping the core, every patch applies, every refusal says why."""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Iterator
from typing import Any

import httpx
import jsonpatch
import pytest
from fault_support import CLUSTER, CONFIG
from hypothesis import HealthCheck, given, settings
from prometheus_client import REGISTRY
from review_strategies import EXAMPLES, broken_reviews, pods, reviews

from webhook.assembly import build_runtime
from webhook.config import load_config
from webhook.review import create_review
from webhook.server.app import create_app

# No example database: a stale entry from another version of the strategies must not decide a run.
FUZZ = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow], database=None)
LONG = settings(FUZZ, max_examples=EXAMPLES * 5)


class App:
    def __init__(self) -> None:
        self.app = create_app(build_runtime(load_config(CONFIG), CLUSTER), ui=False)
        self.loop = asyncio.new_event_loop()
        self.client = httpx.AsyncClient(transport=httpx.ASGITransport(app=self.app), base_url="https://kgwe.test")

    def post(self, path: str, body: bytes) -> httpx.Response:
        request = self.client.post(path, content=body, headers={"content-type": "application/json"})
        return self.loop.run_until_complete(request)

    def close(self) -> None:
        self.loop.run_until_complete(self.client.aclose())
        self.loop.close()


@pytest.fixture(scope="module")
def app() -> Iterator[App]:
    served = App()
    yield served
    served.close()


def internal_errors() -> float:
    return sum(REGISTRY.get_sample_value("kgwe_admission_errors_total", {"endpoint": e, "kind": "internal"}) or 0.0
               for e in ("mutate", "validate"))


def check_answer(endpoint: str, review: Any, reply: httpx.Response) -> dict[str, Any] | None:
    """The properties every answer has; the AdmissionResponse when there is one."""
    assert reply.status_code < 500, reply.text
    if reply.status_code != 200:
        assert reply.status_code in (400, 413)
        status = reply.json()
        assert status["kind"] == "Status" and status["message"], status
        return None
    answer = reply.json()
    assert answer["apiVersion"] == "admission.k8s.io/v1" and answer["kind"] == "AdmissionReview"
    response: dict[str, Any] = answer["response"]
    assert response["uid"] == review["request"]["uid"]
    assert isinstance(response["allowed"], bool)
    if not response["allowed"]:
        message = (response.get("status") or {}).get("message")
        assert isinstance(message, str) and message.strip(), response
    assert (response.get("auditAnnotations") or {}).get("failed-open") != "internal", response
    if "patch" in response:
        assert endpoint == "mutate", "the validating webhook never patches"
        assert response["patchType"] == "JSONPatch"
        patch = json.loads(base64.b64decode(response["patch"]))
        obj = review["request"]["object"]
        assert isinstance(obj, dict)
        patched = jsonpatch.apply_patch(obj, patch)  # raises when a patch does not apply
        json.dumps(patched)
    return response


def ask(app: App, endpoint: str, review: Any) -> dict[str, Any] | None:
    before = internal_errors()
    reply = app.post(f"/{endpoint}?timeout=10s", json.dumps(review).encode())
    response = check_answer(endpoint, review, reply)
    assert internal_errors() == before, "an exception escaped the admission core (answered per onError)"
    return response


@FUZZ
@given(review=reviews())
def test_reviews_are_answered_properly_by_both_webhooks(app: App, review: dict[str, Any]) -> None:
    for endpoint in ("mutate", "validate"):
        ask(app, endpoint, review)


@FUZZ
@given(pod=pods())
def test_a_mutated_pod_is_judged_like_the_api_server_would(app: App, pod: dict[str, Any]) -> None:
    """CREATE through /mutate, its patch applied, then /validate on the result: the API server's sequence."""
    review = create_review(pod, "alice", ["team-a"])
    mutated = ask(app, "mutate", review)
    assert mutated is not None
    obj = review["request"]["object"]
    if "patch" in mutated:
        obj = jsonpatch.apply_patch(obj, json.loads(base64.b64decode(mutated["patch"])))
    ask(app, "validate", create_review(obj, "alice", ["team-a"]))


@FUZZ
@given(body=broken_reviews())
def test_bodies_no_api_server_sends_get_a_clear_answer(app: App, body: Any) -> None:
    for endpoint in ("mutate", "validate"):
        reply = app.post(f"/{endpoint}", json.dumps(body).encode())
        assert reply.status_code < 500, reply.text
        if reply.status_code != 200:
            assert reply.json()["message"]


def _pod(limits: dict[str, Any], **spec: Any) -> dict[str, Any]:
    two_types = {"kgwe.io/accelerator": "nvidia-h100-80gb,nvidia-a100-80gb"}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "odd", "namespace": "team-a", "annotations": two_types},
            "spec": {"containers": [{"name": "main", "image": "cuda", "resources": {"limits": limits}}], **spec}}


# Found by the fuzzers above (they used to be answered per limits.onError instead of by a decision).
FOUND_BY_FUZZING = [
    pytest.param("mutate", _pod({"nvidia.com/gpu": "1"}, affinity=None), id="affinity-null"),
    pytest.param("mutate", _pod({"nvidia.com/gpu": "1"}, affinity={"nodeAffinity": None}), id="node-affinity-null"),
]


def _huge(annotations: dict[str, str], limits: dict[str, str]) -> dict[str, Any]:
    pod = _pod(limits)
    pod["metadata"]["annotations"].update(annotations)
    return pod


# Quantities no device count or size can be: refused as invalid, quickly. `1e999999` used to make int()
# build a million-digit number and hold the event loop for ~27 s; `inf` raised OverflowError.
OUT_OF_RANGE = [
    pytest.param(_pod({"nvidia.com/gpu": "inf"}), id="gpu-inf"),
    pytest.param(_pod({"nvidia.com/gpu": "Infinity"}), id="gpu-Infinity"),
    pytest.param(_pod({"nvidia.com/gpu": "1e999999"}), id="gpu-1e999999"),
    pytest.param(_pod({"nvidia.com/mig-1g.10gb": "1e999999"}), id="mig-1e999999"),
    pytest.param(_huge({"kgwe.io/gpu-memory": "1e999999"}, {"nvidia.com/gpu": "1"}), id="gpu-memory-1e999999"),
]


@pytest.mark.parametrize("pod", OUT_OF_RANGE)
def test_out_of_range_quantities_are_refused_as_invalid(app: App, pod: dict[str, Any]) -> None:
    validated = ask(app, "validate", create_review(pod, "alice", ["team-a"]))
    assert validated is not None and not validated["allowed"]
    assert any(quantity in validated["status"]["message"] for quantity in ("inf", "Infinity", "1e999999")), validated
    ask(app, "mutate", create_review(pod, "alice", ["team-a"]))


@pytest.mark.parametrize(("endpoint", "pod"), FOUND_BY_FUZZING)
def test_pods_found_by_fuzzing_get_a_decision(app: App, endpoint: str, pod: dict[str, Any]) -> None:
    """Each such pod gets a decision (a refusal with a message, or a patch that applies), not the fallback."""
    reply = ask(app, endpoint, create_review(pod, "alice", ["team-a"]))
    assert reply is not None
    assert not any("internal error" in w for w in reply.get("warnings") or [])
    patched = jsonpatch.apply_patch(pod, json.loads(base64.b64decode(reply["patch"])))
    assert patched["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]


@pytest.mark.slow
# A longer hunt (`KGWE_FUZZ_EXAMPLES`) gets the time it asks for: up to 0.1 s per example.
@pytest.mark.timeout(max(120, EXAMPLES * 5 // 10))
@LONG
@given(review=reviews())
def test_reviews_long_run(app: App, review: dict[str, Any]) -> None:
    for endpoint in ("mutate", "validate"):
        ask(app, endpoint, review)
