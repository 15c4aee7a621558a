"""Issue 13 items 12 and 16: pods without KGWE intent pass as they came (at most a warning), a policy's
refusal leads its message, and a bad GPU count is refused for that reason alone."""

from __future__ import annotations

from pathlib import Path

from cluster_dirs import copy_example_cluster, plant
from guarantees_support import gpu_pod, review


def only_tainted_gpu_nodes(target: Path) -> Path:
    copy_example_cluster(target)
    for untainted in ("nodes-other.yaml", "nodes-l4-mps.yaml"):
        (target / untainted).unlink()
    return target


def test_a_plain_gpu_pod_is_never_refused_for_taints(serve_cluster, tmp_path: Path) -> None:
    for webhook in serve_cluster(only_tainted_gpu_nodes(tmp_path / "cluster")):
        answer, mutated = webhook.admit(gpu_pod("legacy", gpus=1))
        assert answer["allowed"] is True
        assert any("taints" in w for w in answer.get("warnings", []))
        assert "tolerations" not in mutated["spec"]  # passed unchanged: KGWE adds nothing unasked


def test_a_plain_pod_pinned_to_an_unlabelled_gpu_node_passes(webhook) -> None:
    pod = gpu_pod("pinned", gpus=2, nodeSelector={"kubernetes.io/hostname": "gpu-unlabelled-01"})
    answer, mutated = webhook.admit(pod)
    assert answer["allowed"] is True
    assert mutated["spec"]["nodeSelector"] == {"kubernetes.io/hostname": "gpu-unlabelled-01"}


def test_a_policy_refusal_leads_the_message(serve_cluster, tmp_path: Path) -> None:
    directory = only_tainted_gpu_nodes(tmp_path / "cluster")
    plant(directory, "zz-planted.yaml", {
        "apiVersion": "kgwe.io/v1alpha1", "kind": "GPUPolicy", "metadata": {"name": "no-legacy"},
        "spec": {"enforcementAction": "Deny",
                 "validations": [{"expression": "has(object.metadata.annotations) && "
                                                "'kgwe.io/accelerator' in object.metadata.annotations",
                                  "message": "name an accelerator type"}]},
    })
    for webhook in serve_cluster(directory):
        answer, _ = webhook.admit(gpu_pod("legacy", gpus=1))
        assert answer["allowed"] is False
        assert answer["status"]["message"].startswith("[no-legacy] name an accelerator type")


def test_a_bad_gpu_count_is_refused_once_for_that_reason(webhook) -> None:
    pod = gpu_pod("half", gpus="1.5", annotations={"kgwe.io/accelerator": "nvidia-h100-80gb"})
    answer = webhook.ask("validate", review(pod))
    assert answer["allowed"] is False
    message = answer["status"]["message"]
    assert "not a whole number of devices" in message
    assert "no node can ever run" not in message and ";" not in message


def test_a_pod_with_intent_that_no_node_can_run_is_still_refused(webhook) -> None:
    pod = gpu_pod("huge", gpus=64, annotations={"kgwe.io/accelerator": "nvidia-h100-80gb"})
    answer, _ = webhook.admit(pod)
    assert answer["allowed"] is False
