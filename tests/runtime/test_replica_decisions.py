"""Identical pods (the replicas of one workload) get one placement decision, never a stale one."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from webhook.admission.request import decode_review
from webhook.assembly import build_runtime
from webhook.config import load_config
from webhook.review import create_review
from webhook.runtime import Runtime

ROOT = Path(__file__).resolve().parents[2]


def _mutate(runtime: Runtime, pod: dict[str, Any]) -> Any:
    review = create_review(pod, "system:serviceaccount:kube-system:replicaset-controller", [])
    return runtime.admission.mutate(decode_review(review))


def _replica() -> dict[str, Any]:
    pod: dict[str, Any] = yaml.safe_load((ROOT / "examples" / "pods" / "05-mig-small.yaml").read_text())
    del pod["metadata"]["name"]
    pod["metadata"]["generateName"] = "notebook-"
    del pod["metadata"]["annotations"]["kgwe.io/sharing"]  # the namespace's default-MIG policy decides
    return pod


def test_replicas_get_one_decision_and_a_new_cluster_or_policy_set_is_seen_at_once() -> None:
    runtime = build_runtime(load_config(ROOT / "examples" / "config.yaml"), ROOT / "examples" / "cluster")
    runtime.store.min_rebuild_interval = 0
    first = _mutate(runtime, _replica())
    assert any("mig-1g.10gb" in op["path"] for op in first.patch), "decided by kgwe.placement.namespace_mig"
    assert _mutate(runtime, _replica()).patch == first.patch

    # The namespace loses its default-MIG label: the next replica is decided on the new snapshot.
    namespace = runtime.store.snapshot().namespaces["inference"]
    relabelled = {
        **namespace,
        "metadata": {**namespace["metadata"], "labels": {"kubernetes.io/metadata.name": "inference"}},
    }
    runtime.store.upsert(relabelled)
    after = _mutate(runtime, _replica())
    assert not any("mig-" in op["path"] for op in after.patch)

    # A policy set that decides otherwise is seen by the next replica: no policy decides MIG any more.
    runtime.policies.reload(builtin=False)
    runtime.store.upsert(namespace)  # the default-MIG label back: only a policy could act on it now
    assert not any("mig-" in op["path"] for op in _mutate(runtime, _replica()).patch)
