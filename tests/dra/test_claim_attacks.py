"""Attacks on the "claims a pod writes itself" path (docs/dra.md section 5a), and the legitimate pods that
must keep passing. Served over real HTTPS with AdmissionReviews as kube-apiserver sends them; templates and
claims are read from, and KGWE's templates and ComputeDomains written to, the fake API server."""

from __future__ import annotations

import base64
import copy
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonpatch
import orjson
import pytest
import yaml
from dra_support import DRA_CLUSTER, ROOT, Webhook, gpu_pod, serve
from kube_fake_apiserver import FakeApiServer
from kubernetes import client as k8s_client

from webhook.cluster.kube_json import KubeJson
from webhook.config import DEFAULT_CONTROLLER_IDENTITIES, load_config
from webhook.dra.claim_reader import KubeClaimReader
from webhook.dra.claimed import GpuClasses
from webhook.dra.compute_domain import channel_template, compute_domain
from webhook.dra.templates import KubeTemplateWriter
from webhook.runtime import build_runtime
from webhook.server.app import create_app
from webhook.workloads.identity import Identity, Signer

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
    (root / "cluster" / "channel-class.yaml").write_text(yaml.safe_dump(CHANNEL_CLASS))
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
    })
    for name in ("all-nvidia", "not-nics", "spliced", "either", "big-memory", "negated", "chosen", "compared",
                 "in-a-string", "commented", "triple"):
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
        runtime.admission.identity = Identity(Signer(IDENTITY_KEY), DEFAULT_CONTROLLER_IDENTITIES)
        return create_app(runtime, ui=False)

    yield from serve(make_app, root / "certs")  # type: ignore[arg-type]


def test_a_deployments_claim_pods_are_charged_to_its_author_not_to_the_replicaset_controller(
    group_tenant_webhook: Webhook,
) -> None:
    # bob (group ml-researchers) may not hold 20 GPUs. Through a Deployment whose template names a claim
    # template of his own, the pods are created by the ReplicaSet controller: judged as that controller
    # (no tenant in `default`), they would pass every quota.
    template = {"metadata": {"labels": {"app": "big"}}, "spec": {
        "containers": [{"name": "m", "image": "cuda", "resources": {"claims": [{"name": "gpus"}]}}],
        "resourceClaims": [{"name": "gpus", "resourceClaimTemplateName": "twenty"}]}}
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
    assert "tenant ml-research" in message and "this pod asks for 20" in message
