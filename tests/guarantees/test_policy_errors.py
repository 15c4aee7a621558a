"""An error never admits a GPU pod: a policy that cannot be evaluated for a pod (its CEL or Rego fails on
the pod's own values, or runs past its time limit) refuses a GPU pod whatever `policies.failureMode`
says. failureMode open (the default) keeps its meaning for the rest: such a policy warns."""

from __future__ import annotations

from pathlib import Path

from cluster_dirs import copy_example_cluster, plant
from guarantees_support import gpu_pod

# Written without `has()`: a pod without the label makes the lookup fail instead of the policy refusing.
TEAM_CAP = {
    "apiVersion": "kgwe.io/v1alpha1", "kind": "GPUPolicy", "metadata": {"name": "team-cap"},
    "spec": {"enforcementAction": "Deny", "match": {"operations": ["CREATE"]},
             "validations": [{"expression": "object.metadata.labels['team'] != 'blocked'",
                              "message": "team blocked from GPUs"}]},
}
GPU_LIMIT = {
    "apiVersion": "kgwe.io/v1alpha1", "kind": "GPUPolicy", "metadata": {"name": "numeric-cap"},
    "spec": {"enforcementAction": "Deny", "match": {"operations": ["CREATE"]},
             "rego": {"module": ("package kgwe.policy.numeric_cap\nimport rego.v1\n"
                                 'deny contains "too many" if '
                                 "to_number(input.request.object.metadata.labels.cap) > 4\n")}},
}


def test_a_policy_that_cannot_decide_refuses_a_gpu_pod(serve_cluster, tmp_path: Path) -> None:
    directory = copy_example_cluster(tmp_path / "cluster")
    plant(directory, "zz-planted.yaml", TEAM_CAP)
    for webhook in serve_cluster(directory):
        # Leaving the label out (the CEL lookup fails) does not get the pod past the policy.
        answer, _ = webhook.admit(gpu_pod("no-team", annotations={"kgwe.io/accelerator": "nvidia-h100-80gb"}))
        assert answer["allowed"] is False
        assert answer["status"]["message"].startswith("[team-cap] the policy engine failed")
        assert "a GPU pod is refused while a policy cannot decide it" in answer["status"]["message"]
        labelled = gpu_pod("ok-team", annotations={"kgwe.io/accelerator": "nvidia-h100-80gb"})
        labelled["metadata"]["labels"] = {"team": "research"}
        assert webhook.admit(labelled)[0]["allowed"] is True


def test_a_value_that_makes_a_rego_policy_fail_does_not_get_a_gpu_pod_past_it(serve_cluster, tmp_path: Path) -> None:
    directory = copy_example_cluster(tmp_path / "cluster")
    plant(directory, "zz-planted.yaml", GPU_LIMIT)
    for webhook in serve_cluster(directory):
        pod = gpu_pod("odd-cap", annotations={"kgwe.io/accelerator": "nvidia-h100-80gb"})
        pod["metadata"]["labels"] = {"cap": "lots"}  # to_number fails
        answer, _ = webhook.admit(pod)
        assert answer["allowed"] is False
        # Named, or (a first failure, slow where RUST_BACKTRACE is set) past the Rego time limit: refused.
        assert "the policy engine failed" in answer["status"]["message"]
        pod["metadata"]["labels"] = {"cap": "2"}
        assert webhook.admit(pod)[0]["allowed"] is True
