"""What a pod asks of DRA on its own (webhook/dra/gate.py `_own_asks`): that a pod asks nothing is remembered per
plan memo entry, found on the entry's pod without its identity; a replica that asks devices through claims of its
own or as extended resources is judged on itself every time. Each replica's `/validate` answer is the answer of a
runtime that never saw the others, in the DRA example cluster.
"""

from __future__ import annotations

import copy
from typing import Any

import orjson
import pytest
from dra_support import DRA_CLUSTER, review

from webhook.admission.outcome import Outcome
from webhook.admission.request import decode_review
from webhook.assembly import build_runtime
from webhook.config import load_config
from webhook.runtime import Runtime

CONFIG = load_config(DRA_CLUSTER.parent / "config.yaml")


def _container(resources: dict[str, Any], claims: list[dict[str, str]] | None = None) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "main", "image": "cuda:12", "resources": {"limits": resources}}
    if claims is not None:
        container["resources"]["claims"] = claims
    return container


PODS = {
    "gpus as resources": {"containers": [_container({"nvidia.com/gpu": "1"})]},
    "devices as extended resources": {"containers": [
        _container({"deviceclass.resource.kubernetes.io/gpu.nvidia.com": "1"})]},
    "a claim of its own": {
        "containers": [_container({"memory": "1Gi"}, [{"name": "gpu"}])],
        "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "someones-gpus"}],
    },
    "a claim of its own beside GPUs": {
        "containers": [_container({"nvidia.com/gpu": "1"}, [{"name": "gpu"}])],
        "resourceClaims": [{"name": "gpu", "resourceClaimName": "shared-gpus"}],
    },
    "a fractional extended resource": {"containers": [
        _container({"deviceclass.resource.kubernetes.io/gpu.nvidia.com": "0.5"})]},
}


def _pod(spec: dict[str, Any], index: int) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"worker-{index}", "generateName": "worker-", "namespace": "team-a",
                         "uid": f"00000000-0000-4000-8000-00000000000{index}", "labels": {"app": "train"}},
            "spec": copy.deepcopy(spec)}


def _runtime() -> Runtime:
    return build_runtime(CONFIG, DRA_CLUSTER)


def _answer(outcome: Outcome) -> bytes:
    return orjson.dumps([outcome.allowed, outcome.message, outcome.code, outcome.warnings, outcome.audit_annotations],
                        option=orjson.OPT_SORT_KEYS)


@pytest.mark.parametrize("name", sorted(PODS))
def test_every_replica_is_judged_as_a_fresh_runtime_judges_it(name: str) -> None:
    warm = _runtime()
    for index in range(4):
        body = review(_pod(PODS[name], index), dry_run=True)
        body["request"]["object"] = warm.admission.mutate(decode_review(body)).object
        fresh = _runtime().admission.validate(decode_review(body))
        assert _answer(warm.admission.validate(decode_review(body))) == _answer(fresh)


def test_only_a_pod_that_asks_nothing_is_remembered_as_asking_nothing() -> None:
    runtime = _runtime()
    for name in ("gpus as resources", "devices as extended resources", "a claim of its own beside GPUs"):
        for index in range(3):
            body = review(_pod(PODS[name], index), dry_run=True)
            body["request"]["object"] = runtime.admission.mutate(decode_review(body)).object
            runtime.admission.validate(decode_review(body))
    # The entries of the pods as `/validate` saw them: mutated, so each carries its tenant.
    entries = [entry for entry in runtime.store.snapshot().derived.get("placement.memo", {}).values()
               if entry is not None and "kgwe.io/tenant" in entry.pod.annotations]
    found = sorted(entry.derived.get("dra.asks-nothing") for entry in entries)
    assert found == [False, False, True]
