"""Issue 30 doors 2 to 4 (SPEC section 13), over real HTTPS with AdmissionReviews as kube-apiserver sends them.

- `pods/ephemeralcontainers` (UPDATE) is judged like a pod: the privileged rule sees the ephemeral
  container, GPUPolicies matching UPDATE run;
- `pods/status` (UPDATE) may not change `kgwe.io/` keys, except KGWE's own controllers (outputs only);
- `/mutate` refuses an intent past an input bound as `/validate` does, and a review without a kind, an
  operation or an object is an HTTP 400, never `allowed`.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from cluster_dirs import copy_example_cluster, plant
from guarantees_support import gpu_pod, review

CONTROLLER = "system:serviceaccount:kgwe-system:kgwe-webhook"
DEBUGGER = {"name": "debugger-x7k2p", "image": "busybox", "targetContainerName": "main",
            "stdin": True, "tty": True}


def running(webhook: Any, pod: dict[str, Any]) -> dict[str, Any]:
    """The pod as the API server stores it after a normal create (mutated, admitted, bound, running)."""
    answer, mutated = webhook.admit(pod)
    assert answer["allowed"] is True, answer
    mutated["metadata"]["uid"] = "0b6c3a52-1111-4c9e-9a55-5e2f7d0c1a01"
    mutated["spec"]["nodeName"] = "dgx-h100-01"
    mutated["status"] = {"phase": "Running"}
    return mutated


def subresource(body: dict[str, Any], name: str) -> dict[str, Any]:
    """`body` as kube-apiserver sends it for a pod's subresource: the same Pod kind, the subresource named."""
    request = body["request"]
    request["subResource"] = name
    request["requestSubResource"] = name
    return body


def debugged(pod: dict[str, Any], **security: Any) -> dict[str, Any]:
    """`pod` with the ephemeral container `kubectl debug --profile=sysadmin` (privileged) or general adds."""
    new = copy.deepcopy(pod)
    new["spec"]["ephemeralContainers"] = [{**DEBUGGER, "securityContext": dict(security)}]
    return new


H100_POD = gpu_pod("train", annotations={"kgwe.io/accelerator": "nvidia-h100-80gb"})


# -- door 2: pods/ephemeralcontainers --------------------------------------------------------------


def test_a_privileged_ephemeral_container_on_a_gpu_pod_is_refused(webhook) -> None:
    old = running(webhook, H100_POD)
    body = subresource(review(debugged(old, privileged=True), operation="UPDATE", old=old), "ephemeralcontainers")
    answer = webhook.ask("validate", body)
    assert answer["allowed"] is False, answer
    assert 'container "debugger-x7k2p" is privileged in a pod that uses GPUs' in answer["status"]["message"]
    # `kubectl debug` without the sysadmin profile is not refused.
    body = subresource(review(debugged(old), operation="UPDATE", old=old), "ephemeralcontainers")
    assert webhook.ask("validate", body)["allowed"] is True


def test_gpupolicies_matching_update_judge_ephemeral_containers(serve_cluster, tmp_path: Path) -> None:
    directory = copy_example_cluster(tmp_path / "cluster")
    plant(directory, "zz-planted.yaml", {
        "apiVersion": "kgwe.io/v1alpha1", "kind": "GPUPolicy", "metadata": {"name": "no-debugging"},
        "spec": {"enforcementAction": "Deny", "match": {"operations": ["UPDATE"]},
                 "validations": [{"expression": "!has(object.spec.ephemeralContainers)",
                                  "message": "GPU pods are not debugged in place"}]},
    })
    for webhook in serve_cluster(directory):
        old = running(webhook, H100_POD)
        body = subresource(review(debugged(old), operation="UPDATE", old=old), "ephemeralcontainers")
        answer = webhook.ask("validate", body)
        assert answer["allowed"] is False, answer
        assert answer["status"]["message"].startswith("[no-debugging] GPU pods are not debugged in place")


# -- door 3: pods/status -----------------------------------------------------------------------------


def test_a_status_update_may_not_change_kgwe_keys(webhook) -> None:
    old = running(webhook, H100_POD)
    for change in (
        lambda p: p["metadata"]["annotations"].update({"kgwe.io/hourly-cost": "0.01"}),
        lambda p: p["metadata"]["annotations"].update({"kgwe.io/tenant": "someone-else"}),
        lambda p: p["metadata"]["annotations"].pop("kgwe.io/accelerator"),
        lambda p: p["metadata"].setdefault("labels", {}).update({"kgwe.io/gang": "other"}),
    ):
        new = copy.deepcopy(old)
        change(new)
        answer = webhook.ask("validate", subresource(review(new, operation="UPDATE", old=old), "status"))
        assert answer["allowed"] is False, answer
        assert "kgwe.io/ keys are fixed at creation" in answer["status"]["message"]


def test_status_updates_without_kgwe_keys_and_kgwe_s_own_controller_pass(webhook) -> None:
    old = running(webhook, H100_POD)
    ready = copy.deepcopy(old)
    ready["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
    assert webhook.ask("validate", subresource(review(ready, operation="UPDATE", old=old), "status"))["allowed"]
    # KGWE's own controller: its pod condition, and its output keys (the type after binding).
    webhook.runtime.config = webhook.runtime.config.model_copy(update={"controller_users": [CONTROLLER]})
    controller = {"operation": "UPDATE", "user": CONTROLLER, "groups": ("system:serviceaccounts",)}
    quota = copy.deepcopy(old)
    quota["status"]["conditions"] = [{"type": "kgwe.io/QuotaAvailable", "status": "False", "reason": "OverQuota"}]
    assert webhook.ask("validate", subresource(review(quota, old=old, **controller), "status"))["allowed"]
    bound = copy.deepcopy(old)
    bound["metadata"]["annotations"]["kgwe.io/accelerator-type"] = "nvidia-h100-80gb"
    assert webhook.ask("validate", subresource(review(bound, old=old, **controller), "status"))["allowed"]
    # Intent stays fixed for it too, as on the pod itself.
    sneaky = copy.deepcopy(old)
    sneaky["metadata"]["annotations"]["kgwe.io/accelerator"] = "nvidia-l4-24gb"
    assert webhook.ask("validate", subresource(review(sneaky, old=old, **controller), "status"))["allowed"] is False


# -- door 4: loose ends ------------------------------------------------------------------------------


def test_mutate_refuses_an_intent_past_a_bound_with_validate_s_message(webhook) -> None:
    over = {
        "kgwe.io/profile": "x" * 5000,
        "kgwe.io/accelerator": ",".join("a" for _ in range(400)),
        "kgwe.io/gang-size": "5000",
    }
    for key, value in over.items():
        annotations = {key: value, **({"kgwe.io/gang": "job"} if key == "kgwe.io/gang-size" else {})}
        body = review(gpu_pod(annotations=annotations))
        mutated = webhook.ask("mutate", copy.deepcopy(body))
        validated = webhook.ask("validate", body)
        assert mutated["allowed"] is False and "patch" not in mutated, key
        assert validated["allowed"] is False, key
        assert mutated["status"]["message"] == validated["status"]["message"], key
        assert mutated["status"]["code"] == validated["status"]["code"] == 422, key


def test_mutate_still_answers_an_ordinary_invalid_intent_with_a_patch(webhook) -> None:
    # Not a bound: a wrong value is /validate's to refuse; /mutate writes the outputs as before.
    answer, _mutated = webhook.mutate(gpu_pod(annotations={"kgwe.io/sharing": "sometimes"}))
    assert answer["allowed"] is True


def test_a_review_without_kind_operation_or_object_is_a_400(webhook) -> None:
    for missing in ("kind", "operation", "object"):
        body = review(gpu_pod(gpus=8))
        body["request"]["object"]["spec"]["containers"][0]["securityContext"] = {"privileged": True}
        del body["request"][missing]
        for endpoint in ("mutate", "validate"):
            reply = webhook.post(endpoint, body)
            assert reply.status_code == 400, (missing, endpoint, reply.text)
            assert reply.json()["kind"] == "Status" and missing in reply.json()["message"]
    # Only the uid: the shape of issue 30's probe.
    reply = webhook.post("validate", {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                                      "request": {"uid": "3f1e0c2a"}})
    assert reply.status_code == 400, reply.text
