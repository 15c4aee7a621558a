"""GPUPolicy objects arriving in the cluster model are compiled without a restart; a broken upload leaves
the last good version serving, and the GPUPolicy's status says why."""

from __future__ import annotations

import copy
import uuid
from pathlib import Path
from typing import Any

import jsonpatch
import yaml

from webhook.admission.request import decode_review
from webhook.assembly import build_runtime
from webhook.config import load_config
from webhook.policy_sync import PolicySync
from webhook.runtime import Runtime

ROOT = Path(__file__).resolve().parents[2]
POLICY = yaml.safe_load((ROOT / "examples" / "policies" / "max-gpus-per-pod.yaml").read_text())


def _runtime() -> Runtime:
    return build_runtime(load_config(ROOT / "examples" / "config.yaml"), ROOT / "examples" / "cluster")


def _validate(runtime: Runtime, gpus: int) -> Any:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "ml-research"},
        "spec": {"containers": [{"name": "a", "image": "x", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]},
    }
    body = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": str(uuid.uuid4()),
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "operation": "CREATE",
            "namespace": "ml-research",
            "userInfo": {"username": "bob", "groups": ["system:authenticated"]},
            "object": pod,
            "dryRun": True,
        },
    }
    mutated = runtime.admission.mutate(decode_review(body))
    body["request"]["object"] = jsonpatch.apply_patch(pod, mutated.patch)
    return runtime.admission.validate(decode_review(body))


def _with_params(max_gpus: int) -> dict[str, Any]:
    policy = copy.deepcopy(POLICY)
    policy["spec"]["params"] = {"maxGpus": max_gpus}
    policy["metadata"]["generation"] = max_gpus
    return policy


def test_new_gpu_policy_is_served_without_restart_and_a_broken_one_keeps_the_last_good() -> None:
    runtime = _runtime()
    runtime.store.min_rebuild_interval = 0  # see every upsert at once (the server debounces rebuilds)
    written: dict[str, dict[str, Any]] = {}
    sync = PolicySync(runtime, write_status=lambda name, condition: written.__setitem__(name, condition))
    assert _validate(runtime, 4).allowed

    runtime.store.upsert(_with_params(2))
    assert sync.sync_once()
    verdict = _validate(runtime, 4)
    assert not verdict.allowed and "at most 2 are allowed" in verdict.message
    assert written["max-gpus-per-pod"]["status"] == "True"

    broken = _with_params(3)
    broken["spec"]["validations"][0]["expression"] = "object.spec.containers.map(c, "  # does not compile
    runtime.store.upsert(broken)
    assert sync.sync_once()
    verdict = _validate(runtime, 4)
    assert not verdict.allowed and "at most 2 are allowed" in verdict.message, "the last good version serves"
    condition = written["max-gpus-per-pod"]
    assert condition["status"] == "False" and condition["reason"] == "CompileErrorLastGoodServing"
    assert condition["message"]

    assert not sync.sync_once(), "nothing changed, nothing recompiled"
