"""Pods that ask for GPUs through ResourceClaims of their own are judged like `nvidia.com/gpu` pods.

A pod creator may skip KGWE's intent and name a ResourceClaimTemplate or ResourceClaim that asks NVIDIA's
DRA driver for GPUs. Those GPUs count against TenantQuotas (against every type the claim may be given),
and a claim KGWE cannot read is a refusal. Served over real HTTPS, AdmissionReviews as kube-apiserver
sends them; in a cluster the templates are read from the (fake) API server.
"""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import yaml
from dra_support import DRA_CLUSTER, Webhook, serve
from kube_fake_apiserver import FakeApiServer
from kubernetes import client as k8s_client

from webhook.assembly import build_runtime
from webhook.cluster.kube_json import KubeJson
from webhook.config import load_config
from webhook.dra.claim_reader import KubeClaimReader
from webhook.dra.claimed import requested_gpus
from webhook.dra.gpu_classes import GpuClasses
from webhook.inventory.capacity import Inventory
from webhook.quota_charges import usage_charges
from webhook.review import review_pod
from webhook.runtime import Runtime
from webhook.server.app import create_app

# Every type examples/cluster-dra publishes through DRA.
TYPES = ("nvidia-h100-80gb", "nvidia-a100-80gb", "nvidia-gb200-186gb", "nvidia-h100-94gb", "nvidia-l40s-48gb")
CONFIG = {"mode": "enforce", "pricing": {"currency": "USD", "perGPUHour": {"nvidia-h100-80gb": 4.5,
                                                                             "nvidia-a100-80gb": 2.8,
                                                                             "nvidia-gb200-186gb": 9.0}}}
# team-a may hold 4 H100s; other types are not limited. A claim of its own may be given an H100.
QUOTA = {
    "apiVersion": "kgwe.io/v1alpha1",
    "kind": "TenantQuota",
    "metadata": {"name": "team-a"},
    "spec": {"tenant": "team-a", "namespaces": ["team-a"],
             "limits": [{"acceleratorType": "nvidia-h100-80gb", "gpus": 4}]},
}
NIC_CLASS = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "DeviceClass",
    "metadata": {"name": "nic.example.com"},
    "spec": {"selectors": [{"cel": {"expression": "device.driver == 'nic.example.com'"}}]},
}


def _request(name: str, device_class: str, count: int | None = None, mode: str | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"deviceClassName": device_class}
    if count is not None:
        body["count"] = count
    if mode is not None:
        body["allocationMode"] = mode
    return {"name": name, "exactly": body}


def _template(name: str, *requests: dict[str, Any], namespace: str = "team-a") -> dict[str, Any]:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"spec": {"devices": {"requests": list(requests)}}}}


TEMPLATES = [
    _template("eight-gpus", _request("gpu", "gpu.nvidia.com", 8)),
    _template("two-gpus", _request("gpu", "gpu.nvidia.com", 2)),
    _template("one-nic", _request("nic", "nic.example.com")),
    _template("all-gpus", _request("gpu", "gpu.nvidia.com", mode="All")),
    _template("one-or-six", {"name": "gpu", "firstAvailable": [
        {"name": "small", "deviceClassName": "mig.nvidia.com", "count": 1},
        {"name": "big", "deviceClassName": "gpu.nvidia.com", "count": 6},
    ]}),
]


def _pod(name: str, template: str | None = None, claim: str | None = None, gpus: int = 0) -> dict[str, Any]:
    resources: dict[str, Any] = {"limits": {"memory": "1Gi"}, "claims": [{"name": "mine"}]}
    if gpus:
        resources["limits"]["nvidia.com/gpu"] = str(gpus)
    entry: dict[str, Any] = {"name": "mine"}
    if template is not None:
        entry["resourceClaimTemplateName"] = template
    if claim is not None:
        entry["resourceClaimName"] = claim
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "team-a"},
        "spec": {"containers": [{"name": "main", "image": "cuda", "resources": resources}], "resourceClaims": [entry]},
    }


@pytest.fixture(scope="module")
def cluster_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("own-claims")
    cluster = root / "cluster"
    shutil.copytree(DRA_CLUSTER, cluster)
    (cluster / "own.yaml").write_text(yaml.safe_dump_all([QUOTA, NIC_CLASS, *TEMPLATES]))
    (root / "config.yaml").write_text(yaml.safe_dump(CONFIG))
    return root


@pytest.fixture(scope="module")
def webhook(cluster_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Webhook]:
    def make_app() -> object:
        return create_app(build_runtime(load_config(cluster_dir / "config.yaml"), cluster_dir / "cluster"), ui=False)

    yield from serve(make_app, tmp_path_factory.mktemp("certs"))  # type: ignore[arg-type]


def _refusal(answer: dict[str, Any]) -> str:
    assert answer["allowed"] is False, answer
    return str(answer["status"]["message"])


def test_a_claim_of_its_own_for_more_gpus_than_the_quota_is_refused(webhook: Webhook) -> None:
    final, answer = webhook.create(_pod("eight", "eight-gpus"))
    message = _refusal(answer)
    assert ("tenant team-a: nvidia-h100-80gb limit 4 GPUs, this pod asks 8; this pod could never run within it"
            in message)
    # The mutating webhook recorded the tenant, so the pod is found by group-based tenants too.
    assert final["metadata"]["annotations"]["kgwe.io/tenant"] == "team-a"


def test_a_claim_within_the_quota_passes_and_a_claim_for_no_gpu_is_not_charged(webhook: Webhook) -> None:
    _final, answer = webhook.create(_pod("two", "two-gpus", ), dry_run=True)
    assert answer["allowed"] is True, answer
    _final, answer = webhook.create(_pod("nic", "one-nic"))
    assert answer["allowed"] is True, answer


def test_all_devices_and_the_largest_alternative_are_what_is_counted(webhook: Webhook) -> None:
    # `All` may take every device of a node it can hold at once: at most 14, the seven 1g.12gb partitions of
    # each of dra-h100nvl-01's two GPUs (dynamic MIG: its 38 devices share their GPU's counters; dra-a100-01
    # publishes 11 whole GPUs and MIG devices); firstAvailable its largest choice.
    assert "this pod asks 14" in _refusal(webhook.create(_pod("all", "all-gpus"))[1])
    assert "this pod asks 6" in _refusal(webhook.create(_pod("either", "one-or-six"))[1])


def test_a_claim_that_cannot_be_read_is_a_refusal(webhook: Webhook) -> None:
    message = _refusal(webhook.create(_pod("ghost", "not-there"))[1])
    assert "ResourceClaimTemplate team-a/not-there does not exist" in message
    message = _refusal(webhook.create(_pod("ghost-claim", claim="no-such-claim"))[1])
    assert "ResourceClaim team-a/no-such-claim does not exist" in message


def test_where_nothing_depends_on_the_claims_they_are_not_read(webhook: Webhook) -> None:
    # The default namespace has no TenantQuota and RBAC on types is off: a template made after its pod
    # (Helm creates unknown kinds last) is no refusal there.
    pod = _pod("later", "made-after-the-pod")
    pod["metadata"]["namespace"] = "default"
    assert webhook.create(pod)[1]["allowed"] is True


def test_a_name_that_is_not_an_object_name_never_reaches_an_api_path(webhook: Webhook) -> None:
    pod = _pod("sneaky", "../../../api/v1/namespaces/kgwe/secrets/kgwe-webhook-tls")
    assert "resourceClaimTemplateName is not a name" in _refusal(webhook.create(pod)[1])


def test_gpus_asked_both_ways_are_refused(webhook: Webhook) -> None:
    message = _refusal(webhook.create(_pod("both", "two-gpus", gpus=1))[1])
    assert "both as resources" in message and "gpu.nvidia.com" in message


def test_a_forged_kgwe_claim_name_is_read_like_any_other(webhook: Webhook) -> None:
    # Only the exact claim KGWE renders for this pod is KGWE's: a `kgwe-` name is no pass.
    pod = _pod("forged", "eight-gpus")
    pod["spec"]["resourceClaims"][0]["name"] = "kgwe-gpu-0000000000"
    pod["spec"]["containers"][0]["resources"]["claims"] = [{"name": "kgwe-gpu-0000000000"}]
    assert "asks 8" in _refusal(webhook.create(pod)[1])


def _running(name: str, claim_status: dict[str, str] | None, template: str | None, claim: str | None) -> dict[str, Any]:
    pod = _pod(name, template, claim)
    pod["spec"]["nodeName"] = "dra-h100-01"
    pod["status"] = {"phase": "Running"}
    if claim_status is not None:
        pod["status"]["resourceClaimStatuses"] = [claim_status]
    return pod


def test_running_pods_count_what_their_own_claims_hold(cluster_dir: Path, tmp_path: Path) -> None:
    cluster = tmp_path / "cluster"
    shutil.copytree(cluster_dir / "cluster", cluster)
    # trainer-0 holds two H100s through the claim the API server made from its template; notebook holds a
    # 1g.10gb slice through a claim it names directly; waiting's claim is not made yet (its template asks 2).
    pods = [
        _running("trainer-0", {"name": "mine", "resourceClaimName": "trainer-0-gpu-8s2kd"}, "two-gpus", None),
        {**_running("notebook", None, None, "notebook-gpu-q9w4z"), "metadata": {"name": "notebook",
                                                                                  "namespace": "inference"}},
        _running("waiting", None, "two-gpus", None),
        {**_running("done", {"name": "mine", "resourceClaimName": "trainer-0-gpu-8s2kd"}, "two-gpus", None),
         "status": {"phase": "Succeeded"}},
    ]
    # A `kgwe-` name is no pass after admission either: forged's claim is read, KGWE's own (kgwe-rendered,
    # recorded in kgwe.io/dra-claims) counts once, through the annotation.
    forged = _running("forged", None, "kgwe-eight", None)
    forged["spec"]["resourceClaims"][0]["name"] = "kgwe-gpu-0d6e4079e3"
    rendered = _running("rendered", None, "kgwe-0123456789abcdef0123", None)
    rendered["metadata"]["annotations"] = {"kgwe.io/dra-claims": '{"main":{"nvidia.com/gpu":"2"}}'}
    rendered["spec"]["resourceClaims"][0]["name"] = "kgwe-gpu-0d6e4079e3"
    rendered["spec"]["containers"][0]["resources"]["claims"] = [{"name": "kgwe-gpu-0d6e4079e3"}]
    pods += [forged, rendered, {**_template("kgwe-eight", _request("gpu", "gpu.nvidia.com", 8))}]
    (cluster / "running.yaml").write_text(yaml.safe_dump_all(pods))
    runtime: Runtime = build_runtime(load_config(cluster_dir / "config.yaml"), cluster)
    listed = usage_charges(runtime.store.snapshot())
    charges = {c.pod: c for c in listed}
    assert sorted(c.pod for c in listed) == [
        "inference/notebook", "team-a/forged", "team-a/rendered", "team-a/trainer-0", "team-a/waiting"
    ]
    assert charges["team-a/forged"].gpu_equivalents == 8
    assert (charges["team-a/rendered"].gpu_equivalents, charges["team-a/rendered"].every_candidate) == (2, False)
    held = charges["team-a/trainer-0"]
    assert (held.bound_type, held.gpu_equivalents) == ("nvidia-h100-80gb", Decimal(2))
    mig = charges["inference/notebook"]
    assert (mig.bound_type, mig.gpu_equivalents) == ("nvidia-a100-80gb", Decimal(1) / Decimal(7))
    asked = charges["team-a/waiting"]
    assert asked.bound_type is None and asked.every_candidate and asked.gpu_equivalents == 2
    assert set(asked.candidate_types) == set(TYPES)
    # FinOps sees what the claims hold: trainer-0's two H100s at 4.50, notebook's 1g.10gb slice at 2.80 / 7.
    costs = {(c.namespace, c.name): c for c in Inventory(runtime.store.snapshot(), runtime.config).pod_costs}
    assert (costs[("team-a", "trainer-0")].type_id, costs[("team-a", "trainer-0")].hourly) == (
        "nvidia-h100-80gb", Decimal("9.0"))
    assert round(costs[("inference", "notebook")].hourly or 0, 6) == Decimal("0.4")
    assert costs[("team-a", "trainer-0")].tenant == "team-a"
    # With trainer-0's, rendered's and waiting's two H100s each and forged's eight in use, team-a has none left:
    # a new claim pod is admitted gated and waits, saying so.
    _final, answer = _serve_once(runtime, _pod("more", "two-gpus"), tmp_path)
    assert answer["allowed"] is True, answer
    assert any("nvidia-h100-80gb 14 of 4 GPUs in use; this pod asks 2" in w for w in answer["warnings"]), answer


@contextlib.contextmanager
def _serving(runtime: Runtime, certs: Path) -> Iterator[Webhook]:
    yield from serve(lambda: create_app(runtime, ui=False), certs)  # type: ignore[arg-type,return-value]


def _serve_once(runtime: Runtime, pod: dict[str, Any], tmp_path: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    with _serving(runtime, tmp_path / "certs") as webhook:
        return webhook.create(pod)


def test_in_a_cluster_templates_are_read_from_the_api_server_at_admission(
    cluster_dir: Path, tmp_path: Path
) -> None:
    # The cluster directory has no templates here: the API server is the only place to read them from.
    cluster = tmp_path / "cluster"
    shutil.copytree(cluster_dir / "cluster", cluster)
    (cluster / "own.yaml").write_text(yaml.safe_dump_all([QUOTA, NIC_CLASS]))
    fake = FakeApiServer().start()
    configuration = k8s_client.Configuration()
    configuration.host = fake.url
    api = k8s_client.ApiClient(configuration)
    try:
        fake.put("ResourceClaimTemplate", _template("swapped", _request("nic", "nic.example.com")))
        runtime = build_runtime(load_config(cluster_dir / "config.yaml"), cluster)
        runtime.claim_reader = KubeClaimReader(KubeJson(api))
        with _serving(runtime, tmp_path / "certs") as webhook:
            assert webhook.create(_pod("first", "swapped"))[1]["allowed"] is True
            # Deleted and made again with another request an instant later: the next pod is judged by it.
            fake.delete("ResourceClaimTemplate", "team-a/swapped")
            fake.put("ResourceClaimTemplate", _template("swapped", _request("gpu", "gpu.nvidia.com", 8)))
            assert "asks 8" in _refusal(webhook.create(_pod("second", "swapped"))[1])
            fake.delete("ResourceClaimTemplate", "team-a/swapped")
            assert "does not exist" in _refusal(webhook.create(_pod("third", "swapped"))[1])
            fake.put("ResourceClaimTemplate", _template("two-gpus", _request("gpu", "gpu.nvidia.com", 2)))
            fake.fail_next("/apis/resource.k8s.io/v1/namespaces/team-a/resourceclaimtemplates/two-gpus", 500, times=3)
            assert "could not be read" in _refusal(webhook.create(_pod("fourth", "two-gpus"))[1])
    finally:
        api.close()
        fake.close()


def test_which_device_classes_count_as_gpus_and_how_requests_are_read() -> None:
    classes = GpuClasses({
        "gpu.nvidia.com": {"spec": {"selectors": [{"cel": {"expression": "device.driver == 'gpu.nvidia.com'"}}]}},
        "compute-domain-default-channel.nvidia.com": {"spec": {"selectors": [{"cel": {
            "expression": "device.driver == 'compute-domain.nvidia.com'"}}]}},
        "anything": {"spec": {}},  # no selector: it matches GPUs too
    })
    assert "gpu.nvidia.com" in classes and "anything" in classes
    assert "compute-domain-default-channel.nvidia.com" not in classes
    assert "created-a-moment-ago.example.com" in classes  # unknown: a class too new to be seen
    flat = {"devices": {"requests": [{"name": "gpu", "deviceClassName": "gpu.nvidia.com", "count": 3}]}}
    channel = {"devices": {"requests": [_request("ch", "compute-domain-default-channel.nvidia.com")]}}
    asked = requested_gpus([("v1beta1", flat), ("channel", channel)], classes, 8)
    assert (asked.devices, asked.classes, asked.problems) == (3, {"gpu.nvidia.com"}, [])
    broken = {"devices": {"requests": [_request("gpu", "gpu.nvidia.com", -1), {"name": "x"}, "no"]}}
    problems = requested_gpus([("t", broken)], classes, 8).problems
    assert len(problems) == 3 and "is not a positive whole number" in problems[0]


def test_accelerator_type_rbac_needs_every_type_a_claim_of_its_own_may_be_given(
    cluster_dir: Path, tmp_path: Path
) -> None:
    cluster = tmp_path / "cluster"
    shutil.copytree(cluster_dir / "cluster", cluster)

    def may_use(user: str, types: list[str]) -> list[dict[str, Any]]:
        name = f"{user}-types"
        return [
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": name},
             "rules": [{"apiGroups": ["kgwe.io"], "resources": ["acceleratortypes"], "resourceNames": types,
                        "verbs": ["use"]}]},
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": name},
             "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
             "subjects": [{"kind": "User", "name": user}]},
        ]

    (cluster / "rbac.yaml").write_text(yaml.safe_dump_all([*may_use("alice", ["nvidia-a100-80gb"]),
                                                           *may_use("bob", list(TYPES))]))
    config = {**CONFIG, "rbac": {"acceleratorTypes": True}}
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    runtime = build_runtime(load_config(tmp_path / "config.yaml"), cluster)
    refused = review_pod(runtime.admission, _pod("a", "two-gpus"), "alice")
    assert not refused.allowed and 'user alice may not use accelerator type "nvidia-h100-80gb"' in refused.message
    assert review_pod(runtime.admission, _pod("b", "two-gpus"), "bob").allowed
    # A claim for no GPU needs no type.
    assert review_pod(runtime.admission, _pod("c", "one-nic"), "alice").allowed
