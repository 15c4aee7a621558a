"""RBAC end to end: the example cluster's Roles and bindings, the webhooks' admission path, real AdmissionReviews."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from webhook.assembly import build_runtime
from webhook.config import load_config, parse_config
from webhook.review import review_pod
from webhook.runtime import Runtime

ROOT = Path(__file__).resolve().parents[2]
NVL72 = {"kgwe.io/profile": "nvl72"}
TRAINER = "system:serviceaccount:ml-research:trainer"
SA_GROUPS = ["system:serviceaccounts", "system:serviceaccounts:ml-research"]


def gpu_pod(namespace: str, name: str, gpus: int, annotations: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "annotations": dict(annotations)},
        "spec": {"containers": [{"name": "main", "image": "cuda", "resources": {"limits": {"nvidia.com/gpu": gpus}}}]},
    }


@pytest.fixture
def runtime() -> Runtime:
    return build_runtime(load_config(ROOT / "examples" / "config.yaml"), ROOT / "examples" / "cluster")


def test_restricted_profile_refused_with_its_name(runtime: Runtime) -> None:
    result = review_pod(runtime.admission, gpu_pod("ml-research", "a", 4, NVL72), "alice")
    assert not result.allowed
    assert 'user alice may not use hardware profile "nvl72" (needs verb "use" on hardwareprofiles.kgwe.io/nvl72)' in (
        result.message
    )


def test_allowed_by_group_in_the_bound_namespace_only(runtime: Runtime) -> None:
    assert review_pod(runtime.admission, gpu_pod("ml-research", "a", 4, NVL72), "carol", ["ml-researchers"]).allowed
    elsewhere = review_pod(runtime.admission, gpu_pod("team-a", "b", 4, NVL72), "carol", ["ml-researchers"])
    assert not elsewhere.allowed and '"nvl72"' in elsewhere.message


def test_allowed_by_service_account(runtime: Runtime) -> None:
    assert review_pod(runtime.admission, gpu_pod("ml-research", "a", 4, NVL72), TRAINER, SA_GROUPS).allowed


def test_ordinary_profiles_for_every_authenticated_user(runtime: Runtime) -> None:
    result = review_pod(runtime.admission, gpu_pod("team-a", "a", 1, {"kgwe.io/profile": "premium-h100"}), "alice")
    assert result.allowed, result.message


def test_accelerator_types_need_use_when_configured(tmp_path: Path) -> None:
    cluster = tmp_path / "cluster"
    shutil.copytree(ROOT / "examples" / "cluster", cluster)
    (cluster / "rbac.yaml").write_text(yaml.safe_dump_all([
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "l4-only"},
         "rules": [{"apiGroups": ["kgwe.io"], "resources": ["acceleratortypes"], "resourceNames": ["nvidia-l4-24gb"],
                    "verbs": ["use"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": "l4-only"},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "l4-only"},
         "subjects": [{"kind": "Group", "name": "system:authenticated"}]},
    ]))
    config_text = (ROOT / "examples" / "config.yaml").read_text() + "rbac: {acceleratorTypes: true}\n"
    runtime = build_runtime(parse_config(config_text), cluster)
    refused = review_pod(runtime.admission, gpu_pod("team-a", "a", 1, {"kgwe.io/accelerator": "nvidia-h100-80gb"}),
                         "alice")
    assert not refused.allowed
    assert 'user alice may not use accelerator type "nvidia-h100-80gb"' in refused.message
    allowed = review_pod(runtime.admission, gpu_pod("team-a", "b", 1, {"kgwe.io/accelerator": "nvidia-l4-24gb"}),
                         "alice")
    assert allowed.allowed, allowed.message
