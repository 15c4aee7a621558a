"""Whatever a workload's creator writes, workload admission answers: a patch, an admission or a refusal
with a message, never an exception (which the server would answer per onError, i.e. admit)."""

from __future__ import annotations

from typing import Any

from effort import tries
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from workload_support import real_runtime, review

from webhook.admission.request import decode_review
from webhook.runtime import Runtime

RUNTIME: list[Runtime] = []

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**63), max_value=2**63) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
        st.sampled_from(["template", "spec", "metadata", "containers", "replicas", "annotations", "kgwe.io/gang",
                         "replicatedJobs", "pytorchReplicaSpecs", "Worker", "workerGroupSpecs", "parallelism"]),
        inner, max_size=4),
    max_leaves=24,
)
KINDS = [("JobSet", "jobset.x-k8s.io/v1alpha2"), ("PyTorchJob", "kubeflow.org/v1"), ("RayJob", "ray.io/v1"),
         ("LeaderWorkerSet", "leaderworkerset.x-k8s.io/v1"), ("Job", "batch/v1"), ("CronJob", "batch/v1")]


@settings(max_examples=tries(25, 150), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(KINDS), json_values, st.dictionaries(st.sampled_from(["kgwe.io/gang", "kgwe.io/accelerator"]),
                                                            st.text(max_size=10), max_size=2))
def test_any_workload_gets_an_answer(kind: tuple[str, str], spec: Any, annotations: dict[str, str]) -> None:
    if not RUNTIME:
        RUNTIME.append(real_runtime())
    admission = RUNTIME[0].admission
    workload = {"apiVersion": kind[1], "kind": kind[0],
                "metadata": {"name": "w", "namespace": "team-a", "annotations": annotations}, "spec": spec}
    request = decode_review(review(workload, user="alice", groups=("team-a",)))
    mutated = admission.mutate(request)
    assert mutated.allowed
    verdict = admission.validate(request)
    assert verdict.allowed or verdict.message
