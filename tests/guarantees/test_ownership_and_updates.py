"""Issue 13 items 3, 5 and 6: KGWE's outputs are KGWE's alone, `kgwe.io/` keys are fixed at creation, and
GPUPolicies apply on UPDATE as their `match.operations` say."""

from __future__ import annotations

import copy
from pathlib import Path

from cluster_dirs import copy_example_cluster, plant
from guarantees_support import gpu_pod, review


def running(webhook, pod: dict) -> dict:
    """The pod as the API server stores it after a normal create (mutated, admitted, bound)."""
    answer, mutated = webhook.admit(pod, user="bob", groups=("ml-researchers", "system:authenticated"))
    assert answer["allowed"] is True, answer
    mutated["metadata"]["uid"] = "0b6c3a52-1111-4c9e-9a55-5e2f7d0c1a01"
    mutated["spec"]["nodeName"] = "dgx-h100-01"
    return mutated


PROFILE_POD = gpu_pod("premium", "ml-research", gpus=4, annotations={"kgwe.io/profile": "premium-h100"})


def test_removing_intent_on_update_is_undone_by_mutate_and_refused_by_validate(webhook) -> None:
    old = running(webhook, PROFILE_POD)
    new = copy.deepcopy(old)
    del new["metadata"]["annotations"]["kgwe.io/profile"]
    args = {"operation": "UPDATE", "old": old, "user": "bob", "groups": ("ml-researchers",)}
    answer, restored = webhook.mutate(new, **args)
    assert restored["metadata"]["annotations"]["kgwe.io/profile"] == "premium-h100"
    assert any("fixed at creation" in w for w in answer["warnings"])
    # The mutating webhook fails open: /validate must refuse the change on its own.
    refused = webhook.ask("validate", review(new, **args))
    assert refused["allowed"] is False
    assert "kgwe.io/profile" in refused["status"]["message"]


def test_changing_any_intent_key_on_update_is_refused(webhook) -> None:
    old = running(webhook, gpu_pod("small", annotations={"kgwe.io/accelerator": "nvidia-a100-80gb"}))
    for key, value in (("kgwe.io/gpu-memory", "1Gi"), ("kgwe.io/sharing", "mps"), ("kgwe.io/gpu-fraction", "0.1"),
                       ("kgwe.io/accelerator", "nvidia-l4-24gb"), ("kgwe.io/gang", "other")):
        new = copy.deepcopy(old)
        new["metadata"]["annotations"][key] = value
        answer = webhook.ask("validate", review(new, operation="UPDATE", old=old))
        assert answer["allowed"] is False, key
        assert key in answer["status"]["message"]


def test_an_unrelated_update_passes(webhook) -> None:
    old = running(webhook, PROFILE_POD)
    new = copy.deepcopy(old)
    new["metadata"].setdefault("labels", {})["stage"] = "eval"
    assert webhook.ask("validate", review(new, operation="UPDATE", old=old))["allowed"] is True


def test_kgwe_controllers_may_update_outputs_but_not_intent(webhook) -> None:
    webhook.runtime.config = webhook.runtime.config.model_copy(
        update={"controller_users": ["system:serviceaccount:kgwe-system:kgwe-webhook"]})
    controller = {"operation": "UPDATE", "user": "system:serviceaccount:kgwe-system:kgwe-webhook",
                  "groups": ("system:serviceaccounts",)}
    old = running(webhook, PROFILE_POD)
    bound = copy.deepcopy(old)
    bound["metadata"]["annotations"]["kgwe.io/accelerator-type"] = "nvidia-h100-80gb"
    assert webhook.ask("validate", review(bound, old=old, **controller))["allowed"] is True
    sneaky = copy.deepcopy(old)
    del sneaky["metadata"]["annotations"]["kgwe.io/profile"]
    assert webhook.ask("validate", review(sneaky, old=old, **controller))["allowed"] is False


def test_user_set_outputs_are_refused_when_mutate_was_skipped(webhook) -> None:
    pod = gpu_pod("cheap", annotations={"kgwe.io/accelerator": "nvidia-h100-80gb"})
    placed = webhook.mutate(pod)[1]
    for key, value in (("kgwe.io/tenant", "free-tier"), ("kgwe.io/hourly-cost", "0"),
                       ("kgwe.io/accelerator-type", "nvidia-l4-24gb")):
        forged = copy.deepcopy(placed)
        forged["metadata"]["annotations"][key] = value
        answer = webhook.ask("validate", review(forged))
        assert answer["allowed"] is False, key
        assert key in answer["status"]["message"] and "written by KGWE" in answer["status"]["message"]
    # What /mutate wrote is exactly what /validate expects.
    assert webhook.ask("validate", review(placed))["allowed"] is True


def test_mutate_overwrites_forged_outputs(webhook) -> None:
    pod = gpu_pod("cheap", annotations={"kgwe.io/accelerator": "nvidia-h100-80gb", "kgwe.io/tenant": "free-tier",
                                        "kgwe.io/hourly-cost": "0"})
    _answer, placed = webhook.mutate(pod)
    assert placed["metadata"]["annotations"]["kgwe.io/tenant"] == "team-a"
    assert placed["metadata"]["annotations"]["kgwe.io/hourly-cost"] != "0"


def test_a_gang_label_without_gang_intent_is_removed_or_refused(webhook) -> None:
    pod = gpu_pod("joiner", annotations={"kgwe.io/accelerator": "nvidia-gb200-186gb"})
    pod["metadata"]["labels"] = {"kgwe.io/gang": "someone-elses-gang", "app": "x"}
    _answer, placed = webhook.mutate(pod)
    assert "kgwe.io/gang" not in placed["metadata"]["labels"] and placed["metadata"]["labels"]["app"] == "x"
    refused = webhook.ask("validate", review(pod))  # as if /mutate had been skipped
    assert refused["allowed"] is False and "label kgwe.io/gang" in refused["status"]["message"]


def test_gpupolicies_apply_on_update(serve_cluster, tmp_path: Path) -> None:
    directory = copy_example_cluster(tmp_path / "cluster")
    plant(directory, "zz-planted.yaml", {
        "apiVersion": "kgwe.io/v1alpha1", "kind": "GPUPolicy", "metadata": {"name": "keep-owner"},
        "spec": {"enforcementAction": "Deny", "match": {"operations": ["CREATE", "UPDATE"]},
                 "validations": [{"expression": "has(object.metadata.labels) && 'owner' in object.metadata.labels",
                                  "message": "GPU pods keep their owner label"}]},
    })
    for webhook in serve_cluster(directory):
        pod = gpu_pod("owned", annotations={"kgwe.io/accelerator": "nvidia-h100-80gb"})
        pod["metadata"]["labels"] = {"owner": "alice"}
        answer, placed = webhook.admit(pod)
        assert answer["allowed"] is True
        new = copy.deepcopy(placed)
        del new["metadata"]["labels"]["owner"]
        refused = webhook.ask("validate", review(new, operation="UPDATE", old=placed))
        assert refused["allowed"] is False
        assert refused["status"]["message"].startswith("[keep-owner] GPU pods keep their owner label")


def test_gpupolicies_matching_only_create_leave_updates_alone(serve_cluster, tmp_path: Path) -> None:
    directory = copy_example_cluster(tmp_path / "cluster")
    plant(directory, "zz-planted.yaml", {
        "apiVersion": "kgwe.io/v1alpha1", "kind": "GPUPolicy", "metadata": {"name": "create-only"},
        "spec": {"enforcementAction": "Deny", "match": {"operations": ["CREATE"]},
                 "validations": [{"expression": "has(object.metadata.labels) && 'owner' in object.metadata.labels",
                                  "message": "GPU pods need an owner label"}]},
    })
    for webhook in serve_cluster(directory):
        pod = gpu_pod("owned", annotations={"kgwe.io/accelerator": "nvidia-h100-80gb"})
        pod["metadata"]["labels"] = {"owner": "alice"}
        _answer, placed = webhook.admit(pod)
        new = copy.deepcopy(placed)
        del new["metadata"]["labels"]["owner"]
        assert webhook.ask("validate", review(new, operation="UPDATE", old=placed))["allowed"] is True


def test_users_cannot_lift_the_gang_gate(webhook) -> None:
    old = gpu_pod("member", annotations={"kgwe.io/gang": "job", "kgwe.io/gang-size": "2",
                                         "kgwe.io/accelerator": "nvidia-gb200-186gb"})
    old["spec"]["schedulingGates"] = [{"name": "kgwe.io/gang"}, {"name": "example.com/other"}]
    new = copy.deepcopy(old)
    new["spec"]["schedulingGates"] = [{"name": "example.com/other"}]
    refused = webhook.ask("validate", review(new, operation="UPDATE", old=old))
    assert refused["allowed"] is False and "kgwe.io/gang" in refused["status"]["message"]
    # Other gates are the user's business.
    other = copy.deepcopy(old)
    other["spec"]["schedulingGates"] = [{"name": "kgwe.io/gang"}]
    assert webhook.ask("validate", review(other, operation="UPDATE", old=old))["allowed"] is True
