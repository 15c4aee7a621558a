"""Identical pods (the replicas of one workload) reuse one placement decision, never a stale one."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import yaml

from webhook.admission.request import decode_review
from webhook.assembly import build_runtime
from webhook.config import load_config
from webhook.runtime import Runtime

ROOT = Path(__file__).resolve().parents[2]


def _mutate(runtime: Runtime, pod: dict[str, Any]) -> Any:
    body = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": str(uuid.uuid4()),
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "operation": "CREATE",
            "namespace": pod["metadata"]["namespace"],
            "userInfo": {"username": "system:serviceaccount:kube-system:replicaset-controller"},
            "object": pod,
        },
    }
    return runtime.admission.mutate(decode_review(body))


def _replica() -> dict[str, Any]:
    pod: dict[str, Any] = yaml.safe_load((ROOT / "examples" / "pods" / "05-mig-small.yaml").read_text())
    del pod["metadata"]["name"]
    pod["metadata"]["generateName"] = "notebook-"
    del pod["metadata"]["annotations"]["kgwe.io/sharing"]  # the namespace's default-MIG policy decides
    return pod


def test_replicas_share_a_decision_and_a_new_policy_set_or_cluster_invalidates_it() -> None:
    runtime = build_runtime(load_config(ROOT / "examples" / "config.yaml"), ROOT / "examples" / "cluster")
    runtime.store.min_rebuild_interval = 0
    first = _mutate(runtime, _replica())
    assert any("mig-1g.10gb" in op["path"] for op in first.patch), "decided by kgwe.placement.namespace_mig"
    assert len(runtime.policy_glue._decisions) == 2  # the cache's key and one decision

    assert _mutate(runtime, _replica()).patch == first.patch
    assert len(runtime.policy_glue._decisions) == 2, "the second replica reused the decision"

    # The namespace loses its default-MIG label: a new snapshot, so no stale decision is reused.
    namespace = runtime.store.snapshot().namespaces["inference"]
    relabelled = {
        **namespace,
        "metadata": {**namespace["metadata"], "labels": {"kubernetes.io/metadata.name": "inference"}},
    }
    runtime.store.upsert(relabelled)
    after = _mutate(runtime, _replica())
    assert not any("mig-" in op["path"] for op in after.patch)

    # A policy reload starts a new cache generation too.
    generation = runtime.policies.generation
    runtime.policies.reload(
        builtin=True,
        gpu_policies=[yaml.safe_load((ROOT / "examples" / "policies" / "max-gpus-per-pod.yaml").read_text())],
    )
    assert runtime.policies.generation != generation
