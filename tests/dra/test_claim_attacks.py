"""Attacks on the "claims a pod writes itself" path (docs/dra.md section 5a), and the legitimate pods that
must keep passing. Served over real HTTPS with AdmissionReviews as kube-apiserver sends them; templates and
claims are read from, and KGWE's templates and ComputeDomains written to, the fake API server."""

from __future__ import annotations

import base64
import contextlib
import copy
import shutil
import uuid
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import jsonpatch
import orjson
import pytest
import yaml
from dra_support import DRA_CLUSTER, ROOT, Webhook, gpu_pod, serve
from kube_fake_apiserver import FakeApiServer
from kubernetes import client as k8s_client
from server_support import admission_review

from webhook.assembly import build_runtime
from webhook.cluster.kube_json import KubeJson
from webhook.config import load_config
from webhook.dra.claim_reader import KubeClaimReader
from webhook.dra.compute_domain import channel_template, compute_domain
from webhook.dra.gpu_classes import GpuClasses
from webhook.dra.templates import KubeTemplateWriter
from webhook.quota_charges import usage_charges
from webhook.server.app import create_app
from webhook.wing_config import DEFAULT_CONTROLLER_IDENTITIES
from webhook.workloads.identity import Identity, Signer
from webhook.workloads.kind import workloads_of

CLUSTER = ROOT / "examples" / "cluster"
EXAMPLE_CONFIG = ROOT / "examples" / "config.yaml"

CONFIG = {"mode": "enforce", "pricing": {"currency": "USD", "perGPUHour": {"nvidia-h100-80gb": 4.5,
                                                                             "nvidia-a100-80gb": 2.8,
                                                                             "nvidia-gb200-186gb": 9.0}}}
# The class NVIDIA's driver installs for a ComputeDomain's IMEX channels: it gives no GPU.
CHANNEL_CLASS = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "DeviceClass",
    "metadata": {"name": "compute-domain-default-channel.nvidia.com"},
    "spec": {"selectors": [{"cel": {"expression": (
        "device.driver == 'compute-domain.nvidia.com' && "
        "device.attributes['compute-domain.nvidia.com'].type == 'channel'")}}]},
}


IMPLICIT = "deviceclass.resource.kubernetes.io/"
# team-a may hold 4 H100s; other types are not limited.
QUOTA = {"apiVersion": "kgwe.io/v1alpha1", "kind": "TenantQuota", "metadata": {"name": "team-a"},
         "spec": {"tenant": "team-a", "namespaces": ["team-a"],
                  "limits": [{"acceleratorType": "nvidia-h100-80gb", "gpus": 4}]}}
# An administrator's class that lets pods ask `example.com/gpu` and get GPUs through DRA (KEP-5004).
MAPPED_CLASS = {
    "apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": "example-gpus"},
    "spec": {"selectors": [{"cel": {"expression": "device.driver == 'gpu.nvidia.com'"}}],
             "extendedResourceName": "example.com/gpu"},
}


def _template(name: str, device_class: str, count: int = 1, namespace: str = "default") -> dict[str, Any]:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"spec": {"devices": {"requests": [
                {"name": "r", "exactly": {"deviceClassName": device_class, "count": count}}]}}}}


def _refusal(answer: dict[str, Any]) -> str:
    assert answer["allowed"] is False, answer
    return str(answer["status"]["message"])


@pytest.fixture(scope="module")
def attack_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("claim-attacks")
    shutil.copytree(DRA_CLUSTER, root / "cluster")
    (root / "cluster" / "channel-class.yaml").write_text(yaml.safe_dump_all([CHANNEL_CLASS, MAPPED_CLASS, QUOTA]))
    (root / "config.yaml").write_text(yaml.safe_dump(CONFIG))
    return root


@pytest.fixture(scope="module")
def api_server() -> Iterator[FakeApiServer]:
    server = FakeApiServer().start()
    yield server
    server.close()


@pytest.fixture(scope="module")
def webhook(attack_dir: Path, api_server: FakeApiServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Webhook]:
    """One replica as in a cluster: KGWE's templates and domains are created in the API server, and the
    claims pods name are read from it."""
    configuration = k8s_client.Configuration()
    configuration.host = api_server.url
    api = k8s_client.ApiClient(configuration)

    def make_app() -> object:
        runtime = build_runtime(load_config(attack_dir / "config.yaml"), attack_dir / "cluster")
        runtime.claim_templates = KubeTemplateWriter(KubeJson(api))
        runtime.claim_reader = KubeClaimReader(KubeJson(api))
        return create_app(runtime, ui=False)

    try:
        yield from serve(make_app, tmp_path_factory.mktemp("certs"))  # type: ignore[arg-type]
    finally:
        api.close()


def _member(name: str, gang: str) -> dict[str, Any]:
    # Two pods of 4 GB200 GPUs: a gang on multi-node NVLink, so KGWE renders a ComputeDomain of 2 nodes.
    return gpu_pod(name, {"kgwe.io/accelerator": "nvidia-gb200-186gb", "kgwe.io/gang": gang,
                          "kgwe.io/gang-size": "2"}, gpus=4)


def test_a_channel_template_made_first_by_the_pod_creator_gives_no_uncounted_gpus(
    webhook: Webhook, api_server: FakeApiServer
) -> None:
    # The channel template's name is the domain's name + "-channel", and the domain's name a hash anyone can
    # compute; the chart's policy leaves `kgwe-cd-` templates to NVIDIA's ComputeDomain controller. Made
    # first with 8 GPUs, it would be what every member's channel claim gets, charged nowhere.
    name = channel_template(compute_domain("default", "heist", 2))
    api_server.put("ResourceClaimTemplate", _template(name, "gpu.nvidia.com", 8))
    final, answer = webhook.create(_member("heist-0", "heist"))
    assert final["spec"]["resourceClaims"][-1]["resourceClaimTemplateName"] == name  # KGWE's own rendering
    message = _refusal(answer)
    assert name in message and "asks for GPUs" in message


def test_a_gang_whose_channel_template_is_not_made_yet_or_is_the_drivers_passes(
    webhook: Webhook, api_server: FakeApiServer
) -> None:
    # NVIDIA's controller writes the channel template after KGWE creates the domain: at the first member's
    # admission it is usually not there yet.
    _final, answer = webhook.create(_member("early-0", "early"))
    assert answer["allowed"] is True, answer
    name = channel_template(compute_domain("default", "early", 2))
    api_server.put("ResourceClaimTemplate", _template(name, "compute-domain-default-channel.nvidia.com"))
    _final, answer = webhook.create(_member("early-1", "early"))
    assert answer["allowed"] is True, answer


def _class(*expressions: str) -> dict[str, Any]:
    return {"spec": {"selectors": [{"cel": {"expression": e}} for e in expressions]}}


def test_a_class_counts_as_no_gpu_only_when_its_selectors_pin_another_driver() -> None:
    # Classes an administrator writes without naming a GPU driver literally can still match GPUs: all of
    # NVIDIA's devices, every driver but one, a driver name put together. Each of them is a GPU class.
    classes = GpuClasses({
        "all-nvidia": _class("device.driver.endsWith('nvidia.com')"),
        "not-nics": _class("device.driver != 'nic.example.com'"),
        "spliced": _class('device.driver == "gpu." + "nvidia.com"'),
        "either": _class("device.driver == 'nic.example.com' || device.attributes['x'].fast"),
        "big-memory": _class("device.capacity['memory'].compareTo(quantity('40Gi')) >= 0"),
        # A pin that is not top-level, or text that only looks like one, decides nothing.
        "negated": _class("!(true && device.driver == 'nic.example.com' && true)"),
        "chosen": _class("device.attributes['x'].y ? true : device.driver == 'nic.example.com'"),
        "compared": _class("device.driver == 'nic.example.com' == false"),
        "in-a-string": _class("'a' != \"b' && device.driver == 'nic.example.com' && 'c\""),
        "commented": _class("true // && device.driver == 'nic.example.com'"),
        "triple": _class('"""x " && device.driver == \'nic.example.com\' && " y""" != ""'),
        # Pinned to a driver that is no GPU driver (a conjunct of every selector must hold): no GPU.
        "channel": CHANNEL_CLASS,
        "nic": _class('device.driver == "nic.example.com"', "device.attributes['nic.example.com'].rdma"),
        "nic-and": _class("device.attributes['nic.example.com'].rdma && ( device.driver=='nic.example.com' )"),
        # Read in one pass however deep: a pin under more parentheses than KGWE unwraps just counts.
        "deep": _class("(" * 5000 + "device.driver == 'nic.example.com'" + ")" * 5000),
    })
    for name in ("all-nvidia", "not-nics", "spliced", "either", "big-memory", "negated", "chosen", "compared",
                 "in-a-string", "commented", "triple", "deep"):
        assert name in classes, name
    for name in ("channel", "nic", "nic-and"):
        assert name not in classes, name


# -- workloads: their pods are created by controllers ------------------------------------------------------
REPLICASET_CONTROLLER = "system:serviceaccount:kube-system:replicaset-controller"
IDENTITY_KEY = b"0123456789abcdef0123456789abcdef"


def _admission_review(obj: dict[str, Any], user: str, groups: list[str], resource: tuple[str, str, str],
                      ) -> dict[str, Any]:
    group, version, plural = resource
    gvk = {"group": group, "version": version, "kind": obj["kind"]}
    gvr = {"group": group, "version": version, "resource": plural}
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": str(uuid.uuid4()), "kind": gvk, "resource": gvr, "requestKind": gvk, "requestResource": gvr,
        "name": obj["metadata"].get("name", ""), "namespace": obj["metadata"]["namespace"], "operation": "CREATE",
        "userInfo": {"username": user, "uid": str(uuid.uuid5(uuid.NAMESPACE_DNS, user)),
                     "groups": [*groups, "system:authenticated"]},
        "object": obj, "oldObject": None, "dryRun": False,
        "options": {"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1"}}}


def _through_both(webhook: Webhook, body: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """/mutate then /validate, as the API server chains them: (object after the patch, validating answer)."""
    mutated = webhook.ask("/mutate", body)
    assert mutated["allowed"], mutated
    patch = orjson.loads(base64.b64decode(mutated["patch"])) if mutated.get("patch") else []
    obj = jsonpatch.apply_patch(body["request"]["object"], patch) if patch else body["request"]["object"]
    again = copy.deepcopy(body)
    again["request"].update(uid=str(uuid.uuid4()), object=obj)
    return obj, webhook.ask("/validate", again)


@pytest.fixture(scope="module")
def group_tenant_webhook(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Webhook]:
    """The example cluster (ml-research is the tenant of group ml-researchers, 16 H100 and 16 GB200) with a
    template asking for 20 GPUs in `default`, a namespace of no tenant."""
    root = tmp_path_factory.mktemp("workload-claims")
    shutil.copytree(CLUSTER, root / "cluster")
    (root / "cluster" / "twenty.yaml").write_text(yaml.safe_dump(_template("twenty", "gpu.nvidia.com", 20)))

    def make_app() -> object:
        runtime = build_runtime(load_config(EXAMPLE_CONFIG), root / "cluster")
        workloads_of(runtime.admission).identity = Identity(Signer(IDENTITY_KEY), DEFAULT_CONTROLLER_IDENTITIES)
        return create_app(runtime, ui=False)

    yield from serve(make_app, root / "certs")  # type: ignore[arg-type]


@pytest.mark.parametrize("how", ["claim", "extended resource"])
def test_a_deployments_claim_pods_are_charged_to_its_author_not_to_the_replicaset_controller(
    group_tenant_webhook: Webhook, how: str
) -> None:
    # bob (group ml-researchers) may not hold 20 GPUs. Through a Deployment whose template names a claim
    # template of his own (or asks deviceclass.resource.kubernetes.io/gpu.nvidia.com), the pods are created
    # by the ReplicaSet controller: judged as that controller (no tenant in `default`), they would pass
    # every quota.
    if how == "claim":
        template = {"metadata": {"labels": {"app": "big"}}, "spec": {
            "containers": [{"name": "m", "image": "cuda", "resources": {"claims": [{"name": "gpus"}]}}],
            "resourceClaims": [{"name": "gpus", "resourceClaimTemplateName": "twenty"}]}}
    else:
        template = {"metadata": {"labels": {"app": "big"}}, "spec": {"containers": [
            {"name": "m", "image": "cuda", "resources": {"limits": {f"{IMPLICIT}gpu.nvidia.com": "20"}}}]}}
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "big", "namespace": "default"},
                  "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "big"}}, "template": template}}
    admitted, answer = _through_both(
        group_tenant_webhook, _admission_review(deployment, "bob", ["ml-researchers"], ("apps", "v1", "deployments")))
    assert answer["allowed"] is True, answer  # templates are judged by their pods
    signed = admitted["spec"]["template"]["metadata"]["annotations"]["kgwe.io/requested-by"]
    assert orjson.loads(signed)["user"] == "bob"
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {
        **copy.deepcopy(admitted["spec"]["template"]["metadata"]), "name": "big-5d8f7c9b4-x2x7z",
        "namespace": "default"}, "spec": copy.deepcopy(admitted["spec"]["template"]["spec"])}
    controller_groups = ["system:serviceaccounts", "system:serviceaccounts:kube-system"]
    _pod, answer = _through_both(
        group_tenant_webhook, _admission_review(pod, REPLICASET_CONTROLLER, controller_groups, ("", "v1", "pods")))
    message = _refusal(answer)
    assert "tenant ml-research" in message and "this pod asks 20" in message



# -- GPUs through extended resources that DRA serves (KEP-5004): no spec.resourceClaims at all ------------
def _extended_pod(name: str, **limits: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "team-a"},
            "spec": {"containers": [{"name": "main", "image": "cuda", "resources": {"limits": dict(limits)}}]}}


def test_gpus_asked_as_a_device_class_extended_resource_are_counted(webhook: Webhook) -> None:
    # Every DeviceClass is also the extended resource deviceclass.resource.kubernetes.io/<class>: the
    # scheduler makes the pod a claim for that many devices of the class. No resourceClaims, no nvidia.com/.
    pod = _extended_pod("implicit", **{f"{IMPLICIT}gpu.nvidia.com": "8", "memory": "1Gi"})
    assert "this pod asks 8" in _refusal(webhook.create(pod)[1])
    mapped = _extended_pod("mapped", **{"example.com/gpu": "6"})
    assert "this pod asks 6" in _refusal(webhook.create(mapped)[1])
    both = _extended_pod("both", **{f"{IMPLICIT}gpu.nvidia.com": "1", "nvidia.com/gpu": "1"})
    assert "ask one way" in _refusal(webhook.create(both)[1])
    # Within the quota, and a class that gives no GPU, pass.
    assert webhook.create(_extended_pod("two", **{f"{IMPLICIT}gpu.nvidia.com": "2"}), dry_run=True)[1]["allowed"]
    channel = _extended_pod("channel", **{f"{IMPLICIT}compute-domain-default-channel.nvidia.com": "1"})
    assert webhook.create(channel)[1]["allowed"]
    broken = _extended_pod("broken", **{f"{IMPLICIT}gpu.nvidia.com": "1500m"})
    assert "is not a whole number" in _refusal(webhook.create(broken)[1])


def test_running_pods_count_the_devices_they_asked_as_extended_resources(attack_dir: Path, tmp_path: Path) -> None:
    cluster = tmp_path / "cluster"
    shutil.copytree(attack_dir / "cluster", cluster)
    # allocated: the scheduler made its claim (trainer-0-gpu-8s2kd holds two H100s of dra-h100-01);
    # waiting: not scheduled yet, its 3 devices are what it asks; mapped: `example.com/gpu`; channel: no GPU.
    allocated = _extended_pod("allocated", **{f"{IMPLICIT}gpu.nvidia.com": "2"})
    allocated["status"] = {"phase": "Running", "extendedResourceClaimStatus": {
        "resourceClaimName": "trainer-0-gpu-8s2kd",
        "requestMappings": [{"containerName": "main", "resourceName": f"{IMPLICIT}gpu.nvidia.com",
                             "requestName": "container-0-request-0"}]}}
    waiting = _extended_pod("waiting", **{f"{IMPLICIT}gpu.nvidia.com": "3"})
    mapped = _extended_pod("mapped", **{"example.com/gpu": "1"})
    channel = _extended_pod("channel", **{f"{IMPLICIT}compute-domain-default-channel.nvidia.com": "1"})
    (cluster / "running.yaml").write_text(yaml.safe_dump_all([allocated, waiting, mapped, channel]))
    runtime = build_runtime(load_config(attack_dir / "config.yaml"), cluster)
    charges = {c.pod: c for c in usage_charges(runtime.store.snapshot()) if c.namespace == "team-a"}
    assert set(charges) == {"team-a/allocated", "team-a/waiting", "team-a/mapped"}
    held = charges["team-a/allocated"]
    assert (held.bound_type, held.gpu_equivalents) == ("nvidia-h100-80gb", Decimal(2))
    assert charges["team-a/waiting"].every_candidate and charges["team-a/waiting"].gpu_equivalents == 3
    assert charges["team-a/mapped"].gpu_equivalents == 1


# -- legitimate pods: no false refusals ---------------------------------------------------------------------
def _claim_pod(name: str, template: str, namespace: str = "team-a") -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace},
            "spec": {"containers": [{"name": "main", "image": "cuda", "resources": {"claims": [{"name": "mine"}]}}],
                     "resourceClaims": [{"name": "mine", "resourceClaimTemplateName": template}]}}


def test_an_update_of_a_running_claim_pod_is_not_judged_again(webhook: Webhook) -> None:
    # The claim template may be gone by now, and the pod already counts in usage: a label change, a
    # finalizer removed, must pass (spec.resourceClaims cannot change after creation).
    old = _claim_pod("running", "deleted-long-ago")
    old["metadata"]["uid"] = "2c0f6b1e-0000-4000-8000-000000000001"
    new = copy.deepcopy(old)
    new["metadata"]["labels"] = {"stage": "draining"}
    answer = webhook.ask("/validate", admission_review(new, operation="UPDATE", old=old, namespace="team-a"))
    assert answer["allowed"] is True, answer


def test_gang_members_kgwe_renders_keep_passing_as_replicas(webhook: Webhook, api_server: FakeApiServer) -> None:
    # KGWE's own DRA claims and the gang's channel (written by the driver's controller, here an instant
    # after the first member) are no claims of the pods' own: every member of the gang passes, the later
    # ones judged from the decision cache.
    name = channel_template(compute_domain("default", "legit", 2))
    for index in range(2):
        final, answer = webhook.create(_member(f"legit-{index}", "legit"))
        assert answer["allowed"] is True, answer
        assert {c["resourceClaimTemplateName"] for c in final["spec"]["resourceClaims"]} >= {name}
        if not index:
            api_server.put("ResourceClaimTemplate", _template(name, "compute-domain-default-channel.nvidia.com"))


def test_audit_mode_reports_what_it_would_refuse_and_admits(attack_dir: Path, tmp_path: Path) -> None:
    cluster = tmp_path / "cluster"
    shutil.copytree(attack_dir / "cluster", cluster)
    (cluster / "eight.yaml").write_text(yaml.safe_dump(_template("eight", "gpu.nvidia.com", 8, namespace="team-a")))
    (tmp_path / "config.yaml").write_text(yaml.safe_dump({**CONFIG, "mode": "audit"}))
    runtime = build_runtime(load_config(tmp_path / "config.yaml"), cluster)
    with contextlib.ExitStack() as stack:
        audit = stack.enter_context(contextlib.contextmanager(serve)(
            lambda: create_app(runtime, ui=False), tmp_path / "certs"))  # type: ignore[arg-type]
        final, answer = audit.create(_claim_pod("eight", "eight"))
        assert answer["allowed"] is True, answer
        assert any("this pod asks 8" in w for w in answer.get("warnings", [])), answer
        assert "kgwe.io/tenant" not in (final["metadata"].get("annotations") or {})  # audit mode writes nothing


def test_a_claim_pod_of_a_tenant_with_a_quota_waits_behind_the_quota_gate(
    webhook: Webhook, api_server: FakeApiServer
) -> None:
    # GPUs through the pod's own claims are gated like any GPU pod's: the quota controller releases them, and a
    # pod that bypassed the gate is refused. Nothing a request does holds quota (a dry run included).
    api_server.put("ResourceClaimTemplate", _template("three", "gpu.nvidia.com", 3, namespace="team-a"))
    assert webhook.create(_claim_pod("dry", "three"), dry_run=True)[1]["allowed"] is True
    final, answer = webhook.create(_claim_pod("first", "three"))
    assert answer["allowed"] is True
    assert {"name": "kgwe.io/quota"} in final["spec"]["schedulingGates"]
    assert webhook.create(_claim_pod("second", "three"))[1]["allowed"] is True


def test_a_pod_holding_gpus_of_two_types_counts_each_against_its_own_type(attack_dir: Path, tmp_path: Path) -> None:
    # As on a node with GPUs of two types: one H100 and one whole A100 held through the pod's own claim.
    # Charging both to the first type would leave the A100 limit blind to them.
    cluster = tmp_path / "cluster"
    shutil.copytree(attack_dir / "cluster", cluster)
    claim = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
             "metadata": {"name": "mixed", "namespace": "team-a"},
             "spec": {"devices": {"requests": [{"name": "r", "exactly": {"deviceClassName": "gpu.nvidia.com",
                                                                         "count": 2}}]}},
             "status": {"allocation": {"devices": {"results": [
                 {"request": "r", "driver": "gpu.nvidia.com", "pool": "dra-h100-01", "device": "gpu-3"},
                 {"request": "r", "driver": "gpu.nvidia.com", "pool": "dra-a100-01", "device": "gpu-1"}]}}}}
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "mixed", "namespace": "team-a"},
           "spec": {"containers": [{"name": "main", "image": "cuda", "resources": {"claims": [{"name": "c"}]}}],
                    "resourceClaims": [{"name": "c", "resourceClaimName": "mixed"}]},
           "status": {"phase": "Running"}}
    (cluster / "mixed.yaml").write_text(yaml.safe_dump_all([claim, pod]))
    runtime = build_runtime(load_config(attack_dir / "config.yaml"), cluster)
    charges = [c for c in usage_charges(runtime.store.snapshot()) if c.pod == "team-a/mixed"]
    assert sorted((c.bound_type, c.gpu_equivalents) for c in charges) == [
        ("nvidia-a100-80gb", Decimal(1)), ("nvidia-h100-80gb", Decimal(1))]


@pytest.mark.parametrize(("claims", "expected"), [
    ([{"name": f"c{i}", "resourceClaimTemplateName": "three"} for i in range(33)], "at most 32"),
    (["not-an-object"], "must be a JSON object"),  # the decoder's shape screen answers first
    ([{"name": "c"}], "names neither"),
    ([{"name": "c", "resourceClaimTemplateName": "three", "resourceClaimName": "x"}], "names both"),
    ([{"name": "c", "resourceClaimTemplateName": "a/b"}], "is not a name"),
    ([{"name": "c", "resourceClaimName": "x" * 254}], "is not a name"),
    ("everything", "must be a JSON array"),
])
def test_malformed_claim_lists_are_refused_never_crash(webhook: Webhook, claims: Any, expected: str) -> None:
    # Shapes the API server itself would refuse (a webhook may still be sent them by a misbehaving caller).
    pod = _claim_pod("odd", "three")
    pod["spec"]["resourceClaims"] = claims
    message = _refusal(webhook.validate(pod))
    assert expected in message, message


# -- a claim made again under the name a waiting pod names ------------------------------------------------
def _claim(name: str, device_class: str, count: int) -> dict[str, Any]:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": "team-a"},
            "spec": {"devices": {"requests": [{"name": "r", "exactly": {"deviceClassName": device_class,
                                                                        "count": count}}]}}}


def _claim_review(claim: dict[str, Any]) -> dict[str, Any]:
    return admission_review(claim, kind="ResourceClaim", group="resource.k8s.io", version="v1",
                            resource="resourceclaims", namespace="team-a")


def test_a_claim_deleted_and_made_again_for_a_waiting_pod_is_refused(attack_dir: Path, tmp_path: Path) -> None:
    # The pod was admitted naming ResourceClaim `mine` when it asked for one GPU. It waits (here: not yet
    # scheduled); deleted and made again asking 8 H100s, the scheduler would allocate the new one to it,
    # past the quota and the accelerator-type RBAC it was judged by.
    cluster = tmp_path / "cluster"
    shutil.copytree(attack_dir / "cluster", cluster)
    waiting = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "waiting", "namespace": "team-a"},
               "spec": {"containers": [{"name": "main", "image": "cuda", "resources": {"claims": [{"name": "c"}]}}],
                        "resourceClaims": [{"name": "c", "resourceClaimName": "mine"}]},
               "status": {"phase": "Pending"}}
    (cluster / "waiting.yaml").write_text(yaml.safe_dump(waiting))
    runtime = build_runtime(load_config(attack_dir / "config.yaml"), cluster)
    with contextlib.ExitStack() as stack:
        served = stack.enter_context(contextlib.contextmanager(serve)(
            lambda: create_app(runtime, ui=False), tmp_path / "certs"))  # type: ignore[arg-type]
        message = _refusal(served.ask("/validate", _claim_review(_claim("mine", "gpu.nvidia.com", 8))))
        assert "team-a/waiting" in message and "create the pod again" in message
        # Claims no waiting pod names, claims for no GPU, and the claims Kubernetes makes for pods pass.
        assert served.ask("/validate", _claim_review(_claim("other", "gpu.nvidia.com", 8)))["allowed"]
        channel = _claim("mine", "compute-domain-default-channel.nvidia.com", 1)
        assert served.ask("/validate", _claim_review(channel))["allowed"]


def test_a_template_deleted_and_made_again_before_the_pods_claim_is_made_is_refused(
    attack_dir: Path, tmp_path: Path
) -> None:
    # Admitted when template `one` asked for one GPU; deleted before Kubernetes made the pod's claim from it
    # (which it then does as soon as a template of that name appears again): made again with 8 GPUs, the
    # pod would get those. A pod whose claim was made already no longer waits for the template.
    cluster = tmp_path / "cluster"
    shutil.copytree(attack_dir / "cluster", cluster)
    waiting = _claim_pod("waiting", "one")
    claimed = _claim_pod("claimed", "two")
    claimed["status"] = {"phase": "Pending", "resourceClaimStatuses": [{"name": "mine",
                                                                        "resourceClaimName": "claimed-mine-x7k2p"}]}
    (cluster / "pods.yaml").write_text(yaml.safe_dump_all([waiting, claimed]))
    runtime = build_runtime(load_config(attack_dir / "config.yaml"), cluster)

    def review(template: dict[str, Any]) -> dict[str, Any]:
        return admission_review(template, kind="ResourceClaimTemplate", group="resource.k8s.io", version="v1",
                                resource="resourceclaimtemplates", namespace="team-a")

    with contextlib.ExitStack() as stack:
        served = stack.enter_context(contextlib.contextmanager(serve)(
            lambda: create_app(runtime, ui=False), tmp_path / "certs"))  # type: ignore[arg-type]
        message = _refusal(served.ask("/validate", review(_template("one", "gpu.nvidia.com", 8, "team-a"))))
        assert "ResourceClaimTemplate team-a/one" in message and "team-a/waiting" in message
        assert served.ask("/validate", review(_template("two", "gpu.nvidia.com", 8, "team-a")))["allowed"]
