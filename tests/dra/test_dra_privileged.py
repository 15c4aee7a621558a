"""Issue 30, door 1: GPUs asked through DRA are GPUs for every built-in rule (SPEC section 13).

The privileged rule looked only at `nvidia.com/gpu`-style limits, so a privileged pod was admitted when its
GPUs came through a ResourceClaimTemplate of its own, a DRA extended resource, or KGWE's own DRA rendering
(which moves `nvidia.com/gpu` into a claim before `/validate` sees the pod). Over real HTTPS, with
AdmissionReviews as kube-apiserver sends them.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from dra_support import DRA_CLUSTER, Webhook, gpu_pod, serve

from webhook.assembly import build_runtime
from webhook.config import load_config
from webhook.server.app import create_app

CONFIG = {"mode": "enforce", "pricing": {"currency": "USD", "perGPUHour": {"nvidia-h100-80gb": 4.5}}}
TEMPLATE = {
    "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
    "metadata": {"name": "two-gpus", "namespace": "team-a"},
    "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com",
                                                                              "count": 2}}]}}},
}
PRIVILEGED = {"privileged": True}


@pytest.fixture(scope="module")
def webhook(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Webhook]:
    root = tmp_path_factory.mktemp("dra-privileged")
    shutil.copytree(DRA_CLUSTER, root / "cluster")
    (root / "cluster" / "template.yaml").write_text(yaml.safe_dump(TEMPLATE))
    (root / "config.yaml").write_text(yaml.safe_dump(CONFIG))

    def make_app() -> object:
        return create_app(build_runtime(load_config(root / "config.yaml"), root / "cluster"), ui=False)

    yield from serve(make_app, root / "certs")  # type: ignore[arg-type]


def _claim_pod(name: str, privileged: bool) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "main", "image": "cuda",
                                 "resources": {"limits": {"memory": "1Gi"}, "claims": [{"name": "gpu"}]}}
    if privileged:
        container["securityContext"] = dict(PRIVILEGED)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "team-a"},
            "spec": {"containers": [container],
                     "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "two-gpus"}]}}


def _refused_as_privileged(answer: dict[str, Any], container: str) -> None:
    assert answer["allowed"] is False, answer
    assert f'container "{container}" uses GPUs and is privileged' in answer["status"]["message"]


def test_a_claim_of_its_own_is_a_gpu_for_the_privileged_rule(webhook: Webhook) -> None:
    _final, answer = webhook.create(_claim_pod("claimed", privileged=False), dry_run=True)
    assert answer["allowed"] is True, answer  # the same pod, not privileged, is admitted
    _final, answer = webhook.create(_claim_pod("claimed-root", privileged=True), dry_run=True)
    _refused_as_privileged(answer, "main")


def test_a_dra_extended_resource_is_a_gpu_for_the_privileged_rule(webhook: Webhook) -> None:
    pod = gpu_pod("extended", {}, namespace="team-a")
    main = pod["spec"]["containers"][0]
    main["resources"]["limits"] = {"deviceclass.resource.kubernetes.io/gpu.nvidia.com": "1", "memory": "1Gi"}
    main["securityContext"] = dict(PRIVILEGED)
    _final, answer = webhook.create(pod, dry_run=True)
    _refused_as_privileged(answer, "main")


def test_kgwe_s_own_dra_rendering_keeps_the_privileged_rule(webhook: Webhook) -> None:
    pod = gpu_pod("rendered", {"kgwe.io/accelerator": "nvidia-h100-80gb"}, gpus=2)
    pod["spec"]["containers"][0]["securityContext"] = dict(PRIVILEGED)
    final, answer = webhook.create(pod, dry_run=True)
    assert "nvidia.com/gpu" not in final["spec"]["containers"][0]["resources"]["limits"]  # moved into a claim
    _refused_as_privileged(answer, "main")


def test_a_privileged_sidecar_of_a_pod_naming_claims_is_refused(webhook: Webhook) -> None:
    pod = _claim_pod("sidecar", privileged=False)
    pod["spec"]["containers"].append({"name": "tools", "image": "busybox", "securityContext": dict(PRIVILEGED)})
    _final, answer = webhook.create(pod, dry_run=True)
    assert answer["allowed"] is False, answer
    assert 'container "tools" is privileged in a pod that uses GPUs' in answer["status"]["message"]
