"""A sized gang on multi-node NVLink (the GB200 cliques of examples/cluster-dra), written for DRA, over
HTTPS with AdmissionReviews as kube-apiserver sends them: the gang's ComputeDomain is created in the
(fake) API server once, each member carries the domain's IMEX channel claim, and nothing is created on
dry runs; a cluster without the ComputeDomain CRD gets the mutation withdrawn with a warning."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from dra_support import Webhook, gpu_pod
from kube_fake_apiserver import NVIDIA, FakeApiServer

DOMAINS = f"{NVIDIA}/computedomains"
DOMAIN_POSTS = f"{NVIDIA}/namespaces/default/computedomains"
CHANNEL = "kgwe-imex-channel"


def member(name: str, gang: str, size: int, gpus: int, accelerator: str = "nvidia-gb200-186gb") -> dict[str, Any]:
    return gpu_pod(name, {"kgwe.io/accelerator": accelerator, "kgwe.io/gang": gang, "kgwe.io/gang-size": str(size)},
                   gpus=gpus)


def domain_posts(api: FakeApiServer) -> list[dict[str, Any]]:
    return [r.body for r in api.requests if r.method == "POST" and r.path == DOMAIN_POSTS]


def claims_by_name(pod: dict[str, Any]) -> dict[str, str]:
    return {c["name"]: c["resourceClaimTemplateName"] for c in pod["spec"].get("resourceClaims", [])}


@pytest.fixture
def no_crd(fake_api: FakeApiServer) -> Iterator[None]:
    """The cluster has no ComputeDomain CRD (NVIDIA's DRA driver without its compute-domain part)."""
    fake_api.missing.add(DOMAINS)
    yield
    fake_api.missing.discard(DOMAINS)


def test_gang_members_share_one_compute_domain_and_carry_its_channel(webhook: Webhook, fake_api: FakeApiServer) -> None:
    first, verdict = webhook.create(member("trainer-0", "llm", size=2, gpus=4))
    assert verdict["allowed"], verdict
    claims = claims_by_name(first)
    assert CHANNEL in claims and len(claims) == 2  # the GPU claim and the gang's channel
    domains = fake_api.objects("ComputeDomain")
    (domain,) = [d for d in domains.values() if d["metadata"]["labels"].get("kgwe.io/gang") == "llm"]
    assert domain["apiVersion"] == "resource.nvidia.com/v1beta1"
    assert domain["metadata"]["namespace"] == "default"
    assert domain["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "kgwe"
    # Two pods of 4 GPUs on 4-GPU GB200 trays: the gang fills two nodes of one clique.
    assert domain["spec"]["numNodes"] == 2
    assert claims[CHANNEL] == domain["spec"]["channel"]["resourceClaimTemplate"]["name"]
    main, sidecar = first["spec"]["containers"]
    assert {"name": CHANNEL} in main["resources"]["claims"]
    assert "claims" not in sidecar["resources"]  # only the GPU container joins the IMEX domain

    posts = len(domain_posts(fake_api))
    second, verdict = webhook.create(member("trainer-1", "llm", size=2, gpus=4))
    assert verdict["allowed"], verdict
    assert claims_by_name(second) == claims
    assert len(domain_posts(fake_api)) == posts  # the same content-named domain, remembered


def test_small_members_packed_on_one_node_need_one_node(webhook: Webhook, fake_api: FakeApiServer) -> None:
    final, verdict = webhook.create(member("small-0", "pair", size=2, gpus=2))
    assert verdict["allowed"], verdict
    name = claims_by_name(final)[CHANNEL].removesuffix("-channel")
    assert fake_api.objects("ComputeDomain")[f"default/{name}"]["spec"]["numNodes"] == 1


def test_pods_outside_multi_node_nvlink_get_no_domain(webhook: Webhook, fake_api: FakeApiServer) -> None:
    before = len(domain_posts(fake_api))
    alone, verdict = webhook.create(gpu_pod("alone", {"kgwe.io/accelerator": "nvidia-gb200-186gb"}, gpus=4))
    assert verdict["allowed"], verdict
    assert CHANNEL not in claims_by_name(alone)  # no gang: nothing to span nodes
    hopper, verdict = webhook.create(member("hopper-0", "one-box", size=2, gpus=4, accelerator="nvidia-h100-80gb"))
    assert verdict["allowed"], verdict
    assert CHANNEL not in claims_by_name(hopper)  # H100 nodes are in no multi-node clique
    assert len(domain_posts(fake_api)) == before


def test_second_pass_changes_nothing(webhook: Webhook) -> None:
    _answer, once = webhook.mutate(member("again-0", "again", size=2, gpus=4))
    answer, twice = webhook.mutate(once)
    assert "patch" not in answer
    assert twice == once


def test_dry_run_creates_no_domain(webhook: Webhook, fake_api: FakeApiServer) -> None:
    before = len(domain_posts(fake_api))
    final, verdict = webhook.create(member("dry-0", "dry", size=2, gpus=4), dry_run=True)
    assert verdict["allowed"], verdict
    assert CHANNEL in claims_by_name(final)  # the answer is the full one
    assert len(domain_posts(fake_api)) == before
    stored = fake_api.objects("ComputeDomain").values()
    assert not any(d["metadata"]["labels"].get("kgwe.io/gang") == "dry" for d in stored)


@pytest.mark.usefixtures("no_crd")
def test_missing_compute_domain_crd_withdraws_the_mutation(webhook: Webhook) -> None:
    pod = member("nocrd-0", "nocrd", size=2, gpus=4)
    answer, final = webhook.mutate(pod)
    assert "patch" not in answer and final == pod
    assert any(w.startswith("KGWE could not create the gang's ComputeDomain; create the pod again")
               for w in answer["warnings"]), answer["warnings"]
    verdict = webhook.validate(final)
    assert not verdict["allowed"]
