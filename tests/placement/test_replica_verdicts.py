"""`/validate`'s placement check, remembered with the plan (webhook/admission/replicas.py), answers as the
check itself does on the very pod: for every example pod and generated pods (with identity fields that
differ between replicas), first and repeated, in both example clusters, and end to end through
`validate`.
"""

from __future__ import annotations

import copy
from typing import Any

import orjson
import pytest
from effort import tries
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from manifests import example_pods
from placement_support import EXAMPLES, review
from review_strategies import pods

from webhook.admission.outcome import Outcome
from webhook.admission.replicas import remembered
from webhook.admission.request import decode_review
from webhook.assembly import build_runtime
from webhook.config import load_config
from webhook.runtime import Runtime

CONFIG = load_config(EXAMPLES / "config.yaml")
EXAMPLE_PODS = example_pods(EXAMPLES / "pods")


def _runtime(cluster: str) -> Runtime:
    return build_runtime(CONFIG, EXAMPLES / cluster, load_policies=False)


RUNTIMES = {name: _runtime(name) for name in ("cluster", "cluster-dra")}
# Seen once, remembered, then two replicas judged from the memo. A fresh runtime judges the first and the last (its
# answer costs a runtime of its own, most of these tests' time): the last is answered from the memo, so a memo that
# kept a replica's name, uid or time would differ there.
REPLICAS = range(4)
JUDGED = (REPLICAS[0], REPLICAS[-1])


def _replica(pod: dict[str, Any], index: int) -> dict[str, Any]:
    replica = copy.deepcopy(pod)
    metadata = replica.setdefault("metadata", {})
    metadata.update(name=f"worker-{index}", uid=f"00000000-0000-4000-8000-00000000000{index}",
                    creationTimestamp=f"2026-11-24T20:00:0{index}Z")
    return replica


def _assert_remembered_as_computed(runtime: Runtime, pod: dict[str, Any]) -> None:
    validation = runtime.admission
    for index in range(4):  # seen once, remembered, then two replicas judged from the memo
        request = decode_review(review(_replica(pod, index)))
        if request.invalid is not None:
            return
        facts = validation.gather(request, request.object or {}, None)
        if not facts.plan.gpu_pod or facts.intent.problems or facts.demand.invalid:
            continue
        expected = validation._placement_problems(facts)
        assert remembered(facts, "validate.placement", runtime.config, validation._placement_problems) == expected


@pytest.mark.parametrize("cluster", sorted(RUNTIMES))
@pytest.mark.parametrize("index", range(len(EXAMPLE_PODS)))
def test_every_example_pod(cluster: str, index: int) -> None:
    _assert_remembered_as_computed(RUNTIMES[cluster], EXAMPLE_PODS[index])


@settings(max_examples=tries(30, 200), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pod=pods(), cluster=st.sampled_from(sorted(RUNTIMES)))
def test_generated_pods(pod: dict[str, Any], cluster: str) -> None:
    _assert_remembered_as_computed(RUNTIMES[cluster], pod)


def _answer(outcome: Outcome) -> bytes:
    return orjson.dumps([outcome.allowed, outcome.message, outcome.code, outcome.warnings, outcome.audit_annotations,
                         outcome.patch], option=orjson.OPT_SORT_KEYS)


@pytest.mark.parametrize("index", range(len(EXAMPLE_PODS)))
def test_validate_answers_replicas_as_a_fresh_runtime_does(index: int) -> None:
    """Mutated by `/mutate` first (as the API server chains them), then validated as three replicas: each
    answer equals the answer of a runtime that never saw the pod before."""
    pod = EXAMPLE_PODS[index]
    warm = _runtime("cluster")
    for replica in REPLICAS:
        body = review(_replica(pod, replica), dry_run=True)
        mutated = warm.admission.mutate(decode_review(body))
        body["request"]["object"] = mutated.object
        got = _answer(warm.admission.validate(decode_review(body)))
        if replica in JUDGED:
            assert got == _answer(_runtime("cluster").admission.validate(decode_review(body)))


@pytest.mark.parametrize("cluster", sorted(RUNTIMES))
@pytest.mark.parametrize("index", range(len(EXAMPLE_PODS)))
def test_mutate_answers_replicas_as_a_fresh_runtime_does(cluster: str, index: int) -> None:
    """The outputs a plan gives (decision document, types, price, DRA claims) are remembered with the plan
    (webhook/admission/ownership.py): each replica's patch and warnings are a fresh runtime's."""
    pod = EXAMPLE_PODS[index]
    warm = _runtime(cluster)
    for replica in REPLICAS:
        body = review(_replica(pod, replica), dry_run=True)
        got = _answer(warm.admission.mutate(decode_review(body)))
        if replica in JUDGED:
            assert got == _answer(_runtime(cluster).admission.mutate(decode_review(body)))


@pytest.mark.parametrize("index", range(len(EXAMPLE_PODS)))
def test_forged_outputs_on_replicas_are_refused_as_a_fresh_runtime_refuses_them(index: int) -> None:
    pod = EXAMPLE_PODS[index]
    warm = _runtime("cluster")
    for replica in REPLICAS:
        body = review(_replica(pod, replica), dry_run=True)
        mutated = warm.admission.mutate(decode_review(body)).object or {}
        notes = mutated.setdefault("metadata", {}).setdefault("annotations", {})
        key = "kgwe.io/hourly-cost" if replica % 2 else "kgwe.io/decision"
        if key in notes:
            notes[key] = "0.01" if replica % 2 else '{"v":1,"steps":[]}'
        body["request"]["object"] = mutated
        got = _answer(warm.admission.validate(decode_review(body)))
        if replica in JUDGED:
            assert got == _answer(_runtime("cluster").admission.validate(decode_review(body)))
