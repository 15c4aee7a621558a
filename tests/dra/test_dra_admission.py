"""KGWE's intent written for DRA nodes, over HTTPS with AdmissionReviews as kube-apiserver sends them:
claims and templates, the templates created in the (fake) API server once and never on dry runs,
idempotence, refusals that name what exists, quotas and costs on DRA GPUs."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from dra_support import Webhook, gpu_pod, serve_replica
from kube_fake_apiserver import FakeApiServer

# Only the quota test uses team-a (which has a TenantQuota): other pods there would wait behind its gate.
TEMPLATES = "/apis/resource.k8s.io/v1/namespaces/default/resourceclaimtemplates"


def template_posts(api: FakeApiServer) -> list[dict[str, Any]]:
    return [r.body for r in api.requests if r.method == "POST" and r.path == TEMPLATES]


def claim_of(pod: dict[str, Any]) -> tuple[str, str]:
    """(claim name, template name) of the pod's only KGWE claim."""
    (entry,) = pod["spec"]["resourceClaims"]
    return entry["name"], entry["resourceClaimTemplateName"]


def stored_template(api: FakeApiServer, name: str) -> dict[str, Any]:
    return api.objects("ResourceClaimTemplate")[f"default/{name}"]


def test_ordered_types_become_first_available_subrequests(webhook: Webhook, fake_api: FakeApiServer) -> None:
    pod = gpu_pod("ordered", {"kgwe.io/accelerator": "nvidia-h100-80gb,nvidia-a100-80gb"}, gpus=2)
    final, verdict = webhook.create(pod)
    assert verdict["allowed"], verdict
    main, sidecar = final["spec"]["containers"]
    claim, template_name = claim_of(final)
    assert main["resources"] == {"limits": {"memory": "32Gi"}, "claims": [{"name": claim}]}
    assert "claims" not in sidecar["resources"]  # only containers that asked for GPUs get a claim
    assert "nodeSelector" not in final["spec"] and "affinity" not in final["spec"]  # CEL picks the type
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in final["spec"]["tolerations"]
    notes = final["metadata"]["annotations"]
    assert json.loads(notes["kgwe.io/dra-claims"]) == {"main": {"nvidia.com/gpu": "2"}}
    assert notes["kgwe.io/accelerator-type"] == "nvidia-h100-80gb,nvidia-a100-80gb"
    assert notes["kgwe.io/hourly-cost"] == "9"  # 2 GPUs at the dearer type's 4.50
    template = stored_template(fake_api, template_name)
    assert template["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "kgwe"}
    (request,) = template["spec"]["spec"]["devices"]["requests"]
    assert request["name"] == "gpu"
    assert [(s["name"], s["deviceClassName"], s["count"]) for s in request["firstAvailable"]] == [
        ("nvidia-h100-80gb", "gpu.nvidia.com", 2),
        ("nvidia-a100-80gb", "gpu.nvidia.com", 2),
    ]
    assert [s["selectors"][0]["cel"]["expression"] for s in request["firstAvailable"]] == [
        'device.attributes["gpu.nvidia.com"].productName == "NVIDIA H100 80GB HBM3"',
        'device.attributes["gpu.nvidia.com"].productName == "NVIDIA A100-SXM4-80GB"',
    ]


def test_one_type_is_an_exact_request(webhook: Webhook, fake_api: FakeApiServer) -> None:
    final, verdict = webhook.create(gpu_pod("gb200", {"kgwe.io/accelerator": "nvidia-gb200-186gb"}, gpus=4))
    assert verdict["allowed"], verdict
    (request,) = stored_template(fake_api, claim_of(final)[1])["spec"]["spec"]["devices"]["requests"]
    assert request["exactly"] == {
        "deviceClassName": "gpu.nvidia.com",
        "allocationMode": "ExactCount",
        "count": 4,
        "selectors": [{"cel": {"expression": 'device.attributes["gpu.nvidia.com"].productName == "NVIDIA GB200"'}}],
    }


def test_small_gpu_is_mig_profiles_smallest_fitting_first(webhook: Webhook, fake_api: FakeApiServer) -> None:
    final, verdict = webhook.create(gpu_pod("small", {"kgwe.io/gpu-memory": "8Gi", "kgwe.io/sharing": "mig"}))
    assert verdict["allowed"], verdict
    (request,) = stored_template(fake_api, claim_of(final)[1])["spec"]["spec"]["devices"]["requests"]
    subrequests = request["firstAvailable"]
    # dra-a100-01's static slices and every profile dra-h100nvl-01's dynamic MIG offers, by memory then compute.
    assert [(s["name"], s["deviceClassName"]) for s in subrequests] == [
        ("mig-1g-10gb", "mig.nvidia.com"),
        ("mig-1g-12gb", "mig.nvidia.com"),
        ("mig-1g-24gb", "mig.nvidia.com"),
        ("mig-2g-24gb", "mig.nvidia.com"),
        ("mig-3g-40gb", "mig.nvidia.com"),
        ("mig-3g-47gb", "mig.nvidia.com"),
        ("mig-4g-47gb", "mig.nvidia.com"),
        ("mig-7g-94gb", "mig.nvidia.com"),
    ]
    assert subrequests[0]["selectors"][0]["cel"]["expression"] == (
        'device.attributes["gpu.nvidia.com"].profile == "1g.10gb" && '
        'device.attributes["gpu.nvidia.com"].productName == "NVIDIA A100-SXM4-80GB"'
    )
    # Charged as the first choice: one 1g slice of seven at 2.80.
    assert final["metadata"]["annotations"]["kgwe.io/hourly-cost"] == "0.4"


def test_memory_skips_profiles_too_small(webhook: Webhook, fake_api: FakeApiServer) -> None:
    final, verdict = webhook.create(gpu_pod("mid", {"kgwe.io/gpu-memory": "40Gi", "kgwe.io/sharing": "mig"}))
    assert verdict["allowed"], verdict
    (request,) = stored_template(fake_api, claim_of(final)[1])["spec"]["spec"]["devices"]["requests"]
    assert [s["name"] for s in request["firstAvailable"]] == [
        "mig-3g-40gb", "mig-3g-47gb", "mig-4g-47gb", "mig-7g-94gb"]
    assert {s["deviceClassName"] for s in request["firstAvailable"]} == {"mig.nvidia.com"}


def test_templates_are_created_once_and_pods_share_them(webhook: Webhook, fake_api: FakeApiServer) -> None:
    first, _ = webhook.create(gpu_pod("twin-a", {"kgwe.io/accelerator": "nvidia-h100-80gb"}, gpus=3))
    before = len(template_posts(fake_api))
    second, _ = webhook.create(gpu_pod("twin-b", {"kgwe.io/accelerator": "nvidia-h100-80gb"}, gpus=3))
    assert claim_of(first) == claim_of(second)
    assert len(template_posts(fake_api)) == before  # remembered: no second round trip


def test_second_pass_changes_nothing(webhook: Webhook) -> None:
    _answer, once = webhook.mutate(gpu_pod("again", {"kgwe.io/accelerator": "nvidia-a100-80gb"}))
    answer, twice = webhook.mutate(once)
    assert "patch" not in answer
    assert twice == once


def test_dry_run_creates_nothing(webhook: Webhook, fake_api: FakeApiServer) -> None:
    before = len(template_posts(fake_api))
    final, verdict = webhook.create(gpu_pod("dry", {"kgwe.io/accelerator": "nvidia-gb200-186gb"}, gpus=3), dry_run=True)
    assert verdict["allowed"], verdict
    assert final["spec"]["resourceClaims"]  # the answer is the full one
    assert len(template_posts(fake_api)) == before
    assert f"default/{claim_of(final)[1]}" not in fake_api.objects("ResourceClaimTemplate")


def test_failed_template_creation_withdraws_the_mutation(webhook: Webhook, fake_api: FakeApiServer) -> None:
    fake_api.fail_next(TEMPLATES, 500)
    pod = gpu_pod("unlucky", {"kgwe.io/accelerator": "nvidia-h100-80gb"}, gpus=5)
    answer, final = webhook.mutate(pod)
    assert "patch" not in answer and final == pod
    assert any("create the pod again" in w for w in answer["warnings"])
    verdict = webhook.validate(final)
    assert not verdict["allowed"]
    assert "mutating webhook did not place this GPU pod" in verdict["status"]["message"]
    final, verdict = webhook.create(pod)  # the user creates it again
    assert verdict["allowed"], verdict


@pytest.mark.parametrize(
    ("annotations", "gpus", "fragment"),
    [
        ({"kgwe.io/accelerator": "nvidia-h200-141gb"}, 1,
         "nvidia-h200-141gb: no such GPUs; this cluster has nvidia-a100-80gb (4; MIG 1g.10gb x7, 3g.40gb x2), "
         "nvidia-gb200-186gb (16), nvidia-h100-80gb (16)"),
        ({"kgwe.io/accelerator": "nvidia-h100-80gb"}, 9,
         "this pod asks for 9 GPUs on one node; the most any nvidia-h100-80gb node has is 8"),
        ({"kgwe.io/sharing": "mig", "kgwe.io/gpu-memory": "100Gi"}, 1, "MIG: no slice has 100Gi"),
        # dra-h100nvl-01 publishes 2 x 7g.94gb placements, one per GPU: its counters hold no third.
        ({"kgwe.io/sharing": "mig", "kgwe.io/gpu-memory": "48Gi"}, 3,
         "this pod asks for 3 MIG slices on one node; the most any node has is 2 (7g.94gb: 2)"),
        ({"kgwe.io/accelerator": "nvidia-h100-80gb", "kgwe.io/sharing": "mps", "kgwe.io/gpu-fraction": "0.5"}, 1,
         "MPS sharing: no nvidia-h100-80gb node is shared with MPS (no DRA GPU allows multiple allocations)"),
    ],
)
def test_requests_no_device_could_satisfy_are_refused(
    webhook: Webhook, annotations: dict[str, str], gpus: int, fragment: str
) -> None:
    answer, final = webhook.mutate(gpu_pod("impossible", annotations, gpus=gpus))
    assert "patch" not in answer or "resourceClaims" not in final["spec"]
    verdict = webhook.validate(final)
    assert not verdict["allowed"]
    assert fragment in verdict["status"]["message"]


def test_quota_counts_dra_gpus_of_running_pods(webhook: Webhook) -> None:
    # team-a may use 6 H100s; trainer-0 holds 2 through a KGWE claim.
    _final, ok = webhook.create(gpu_pod("fits", {"kgwe.io/accelerator": "nvidia-h100-80gb"}, 4, "team-a"))
    assert ok["allowed"], ok
    # Admitted pods hold nothing until they exist: a 5-GPU pod waits behind trainer-0's 2 (6 allowed).
    _final, over = webhook.create(gpu_pod("over", {"kgwe.io/accelerator": "nvidia-h100-80gb"}, 5, "team-a"))
    assert over["allowed"], over
    assert any("nvidia-h100-80gb 2 of 6 GPUs in use; this pod asks 5" in w for w in over["warnings"]), over


def test_a_template_squatted_under_kgwes_name_is_not_taken_for_kgwes(webhook: Webhook, fake_api: FakeApiServer) -> None:
    # The template name is a hash of its content: anyone can compute it (here: a dry run shows it) and, with
    # the `edit` role, create a template under it first, asking for 8 GPUs of any type. A pod charged for the
    # one H100 KGWE renders then got whatever that template asks: the 409 was taken for "KGWE's is there".
    pod = gpu_pod("squatted", {"kgwe.io/accelerator": "nvidia-h100-80gb"}, gpus=6)
    dry, _ = webhook.create(pod, dry_run=True)
    name = claim_of(dry)[1]
    fake_api.put("ResourceClaimTemplate", {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": "default", "labels": {"app.kubernetes.io/managed-by": "kgwe"}},
        "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
            "deviceClassName": "gpu.nvidia.com", "allocationMode": "ExactCount", "count": 8}}]}}},
    })
    answer, final = webhook.mutate(pod)
    assert "patch" not in answer and final == pod
    assert any("create the pod again" in w for w in answer["warnings"]), answer["warnings"]
    assert stored_template(fake_api, name)["spec"]["spec"]["devices"]["requests"][0]["exactly"]["count"] == 8
    verdict = webhook.validate(final)
    assert not verdict["allowed"]
    # Once the squatter's template is gone, KGWE writes its own and the pod is admitted.
    fake_api.delete("ResourceClaimTemplate", f"default/{name}")
    final, verdict = webhook.create(pod)
    assert verdict["allowed"], verdict
    assert stored_template(fake_api, name)["spec"]["spec"]["devices"]["requests"][0]["exactly"]["count"] == 6


def test_kgwes_own_template_as_the_api_server_returns_it_is_taken_by_another_replica(
    webhook: Webhook, fake_api: FakeApiServer, dra_dir: Path, tmp_path: Path,
) -> None:
    # A second replica (or this one, past REMEMBER_SECONDS) meets KGWE's template by its 409 and reads it back.
    # The API server writes it with what KGWE leaves out (the claims' empty `metadata`, identity fields): the
    # same request, to be used, not refused as a squatter's.
    pod = gpu_pod("replicated", {"kgwe.io/accelerator": "nvidia-h100-80gb"}, gpus=3)
    final, verdict = webhook.create(pod)
    assert verdict["allowed"], verdict
    name = claim_of(final)[1]
    stored = copy.deepcopy(stored_template(fake_api, name))
    stored["metadata"].update({"uid": "0b6f", "resourceVersion": "7", "creationTimestamp": "2026-11-25T07:00:00Z"})
    stored["spec"]["metadata"] = {}
    fake_api.put("ResourceClaimTemplate", stored)
    for other in serve_replica(dra_dir, fake_api, tmp_path):
        again, verdict = other.create(pod)
        assert verdict["allowed"], verdict
        assert claim_of(again)[1] == name
