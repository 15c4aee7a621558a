"""Hypothesis against the guarantees of docs/security.md, through the real app: long lists and nesting near
the limits, UPDATEs that change intent, outputs spoofed with /mutate skipped, pods that claim a controller
made them. Whatever the input: no internal error, and none of these admitted."""

from __future__ import annotations

import asyncio
import base64
import copy
import json
from collections.abc import Iterator
from typing import Any

import httpx
import jsonpatch
import pytest
from fault_support import CLUSTER, CONFIG
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from review_strategies import EXAMPLES

from webhook.assembly import build_runtime
from webhook.config import load_config
from webhook.review import create_review
from webhook.server.app import create_app

FUZZ = settings(max_examples=max(EXAMPLES // 3, 30), deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
INTENT = ("kgwe.io/accelerator", "kgwe.io/profile", "kgwe.io/gpu-memory", "kgwe.io/sharing",
          "kgwe.io/gpu-fraction", "kgwe.io/topology", "kgwe.io/gang", "kgwe.io/workload")
OUTPUTS = ("kgwe.io/tenant", "kgwe.io/hourly-cost", "kgwe.io/accelerator-type", "kgwe.io/decision")


class App:
    def __init__(self) -> None:
        self.app = create_app(build_runtime(load_config(CONFIG), CLUSTER), ui=False)
        self.loop = asyncio.new_event_loop()
        self.client = httpx.AsyncClient(transport=httpx.ASGITransport(app=self.app), base_url="https://kgwe.test")

    def ask(self, endpoint: str, review: dict[str, Any]) -> dict[str, Any]:
        body = json.dumps(review).encode()  # any nesting: the standard library has no depth limit of 254
        reply = self.loop.run_until_complete(
            self.client.post(f"/{endpoint}?timeout=10s", content=body, headers={"content-type": "application/json"}))
        assert reply.status_code == 200, reply.text
        response: dict[str, Any] = reply.json()["response"]
        assert "failed-open" not in (response.get("auditAnnotations") or {}), response
        assert not any("could not decide" in w or "internal error" in w for w in response.get("warnings") or [])
        return response

    def placed(self, pod: dict[str, Any]) -> dict[str, Any]:
        answer = self.ask("mutate", create_review(pod, "alice", ["team-a"]))
        obj = create_review(pod, "alice", ["team-a"])["request"]["object"]
        if "patch" in answer:
            obj = jsonpatch.apply_patch(obj, json.loads(base64.b64decode(answer["patch"])))
        return obj


@pytest.fixture(scope="module")
def app() -> Iterator[App]:
    served = App()
    yield served
    served.loop.run_until_complete(served.client.aclose())
    served.loop.close()


def gpu_pod(annotations: dict[str, str], gpus: int = 1) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "fuzz", "namespace": "team-a", "annotations": annotations},
            "spec": {"containers": [{"name": "main", "image": "cuda",
                                     "resources": {"limits": {"nvidia.com/gpu": str(gpus), "memory": "8Gi"}}}]}}


type_ids = st.one_of(st.sampled_from(("nvidia-h100-80gb", "nvidia-a100-80gb", "nvidia-l4-24gb", "h100", "x")),
                     st.from_regex(r"[a-z0-9-]{1,12}", fullmatch=True))


@FUZZ
@given(ids=st.lists(type_ids, min_size=17, max_size=3000), gpus=st.integers(1, 8))
def test_long_preference_lists_are_never_admitted(app: App, ids: list[str], gpus: int) -> None:
    pod = gpu_pod({"kgwe.io/accelerator": ",".join(ids)}, gpus)
    answer = app.ask("validate", create_review(pod, "alice", ["team-a"]))
    assert answer["allowed"] is False
    assert "at most 16" in answer["status"]["message"] or "the limit is 1024" in answer["status"]["message"]
    app.ask("mutate", create_review(pod, "alice", ["team-a"]))


@FUZZ
@given(depth=st.integers(40, 400), where=st.sampled_from(("managedFields", "annotation-free", "spec")))
def test_nesting_near_and_past_the_limit_is_decided(app: App, depth: int, where: str) -> None:
    pod = gpu_pod({"kgwe.io/accelerator": "nvidia-h100-80gb"})
    nested: dict[str, Any] = {}
    for _ in range(depth):
        nested = {"f:x": nested}
    if where == "managedFields":
        pod["metadata"]["managedFields"] = [{"manager": "m", "fieldsType": "FieldsV1", "fieldsV1": nested}]
    elif where == "spec":
        pod["spec"]["overhead"] = nested
    else:
        pod["metadata"]["finalizers"] = [nested]
    answer = app.ask("validate", create_review(pod, "alice", ["team-a"]))
    if depth >= 64:
        assert answer["allowed"] is False and "64 levels" in answer["status"]["message"]


@FUZZ
@given(key=st.sampled_from(INTENT), value=st.one_of(st.none(), st.sampled_from(("", "mps", "1Gi", "nvidia-l4-24gb",
                                                                                 "other", "0.5", "inference"))),
       user=st.sampled_from(("alice", "bob", "system:serviceaccount:kube-system:replicaset-controller")))
def test_updates_that_change_intent_are_never_admitted(app: App, key: str, value: str | None, user: str) -> None:
    old = app.placed(gpu_pod({"kgwe.io/accelerator": "nvidia-h100-80gb", "kgwe.io/gpu-memory": "40Gi"}))
    new = copy.deepcopy(old)
    notes = new["metadata"]["annotations"]
    if value is None:
        notes.pop(key, None)
    else:
        notes[key] = value
    review = create_review(new, user, ["team-a"])
    review["request"].update({"operation": "UPDATE", "oldObject": old})
    answer = app.ask("validate", review)
    if old["metadata"]["annotations"].get(key) != notes.get(key):
        assert answer["allowed"] is False, (key, value)
        assert key in answer["status"]["message"]


@FUZZ
@given(spoofed=st.dictionaries(st.sampled_from(OUTPUTS), st.sampled_from(("0", "free", "nvidia-l4-24gb", "{}", "")),
                               min_size=1),
       label=st.booleans())
def test_spoofed_outputs_with_mutate_skipped_are_never_admitted(app: App, spoofed: dict[str, str], label: bool) -> None:
    placed = app.placed(gpu_pod({"kgwe.io/accelerator": "nvidia-h100-80gb"}))
    forged = copy.deepcopy(placed)
    forged["metadata"]["annotations"].update(spoofed)
    if label:
        forged["metadata"].setdefault("labels", {})["kgwe.io/gang"] = "another-teams-gang"
    if forged == placed:
        return
    answer = app.ask("validate", create_review(forged, "alice", ["team-a"]))
    assert answer["allowed"] is False


@FUZZ
@given(claimed=st.one_of(st.text(max_size=200), st.sampled_from((
    '{"user":"bob","groups":["ml-researchers"],"namespace":"team-a"}', "bob", "bob;sig=00"))),
    user=st.sampled_from(("alice", "system:serviceaccount:kube-system:replicaset-controller",
                          "system:serviceaccount:kube-system:job-controller")))
def test_a_forged_requester_never_changes_who_is_charged(app: App, claimed: str, user: str) -> None:
    pod = gpu_pod({"kgwe.io/accelerator": "nvidia-h100-80gb", "kgwe.io/requested-by": claimed})
    answer = app.ask("validate", create_review(pod, user, ["system:serviceaccounts"]))
    assert answer["allowed"] is False
    assert "kgwe.io/requested-by" in answer["status"]["message"]
