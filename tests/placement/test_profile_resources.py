"""ODH/OpenShift AI-style hardware profiles: `spec.resources` (default, min, max per resource) and `spec.queue`
(a Kueue LocalQueue), applied at admission to pods and to workloads' templates (docs/placement.md)."""

from __future__ import annotations

import copy
import shutil
import uuid
from pathlib import Path
from typing import Any

import jsonpatch
import pytest
import yaml
from placement_support import EXAMPLES, Admit, load_pod

from webhook.admission.request import decode_review
from webhook.assembly import build_runtime
from webhook.config import load_config
from webhook.placement.profile_resources import bound_problems, missing_defaults, profile_resources
from webhook.runtime import Runtime

QUEUE = "kueue.x-k8s.io/queue-name"
MIG_PROFILE = {
    "apiVersion": "kgwe.io/v1alpha1",
    "kind": "HardwareProfile",
    "metadata": {"name": "mig-workbench"},
    "spec": {
        "acceleratorTypes": ["nvidia-a100-80gb"],
        "sharing": {"mode": "mig", "migProfile": "1g.10gb"},
        "resources": {"nvidia.com/gpu": {"default": 1, "max": 1}, "memory": {"default": "8Gi"}},
        "queue": "small",
    },
}
OPEN_ROLE = {
    "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "mig-workbench-users"},
    "rules": [{"apiGroups": ["kgwe.io"], "resources": ["hardwareprofiles"], "resourceNames": ["mig-workbench"],
               "verbs": ["use"]}],
}
OPEN_BINDING = {
    "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
    "metadata": {"name": "mig-workbench-users"},
    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "mig-workbench-users"},
    "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "system:authenticated"}],
}


def _pod(profile: str, resources: dict[str, Any] | None = None, labels: dict[str, str] | None = None,
         containers: int = 1) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": f"c{i}", "image": "cuda"} for i in range(containers)]}
    if resources is not None:
        spec["containers"][0]["resources"] = resources
    metadata: dict[str, Any] = {"name": "nb", "namespace": "team-a", "annotations": {"kgwe.io/profile": profile}}
    if labels:
        metadata["labels"] = labels
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


def test_a_pod_that_sets_nothing_gets_the_defaults_on_its_first_container_and_the_queue(admit: Admit) -> None:
    final, _mutated, verdict = admit.create(load_pod("13-profile-defaults.yaml"))
    assert verdict.allowed, verdict.message
    assert final["spec"]["containers"][0]["resources"] == {
        "limits": {"nvidia.com/gpu": "1"}, "requests": {"cpu": "4", "memory": "32Gi"},
    }
    assert final["metadata"]["labels"][QUEUE] == "notebooks"
    assert final["metadata"]["annotations"]["kgwe.io/accelerator-type"] == "nvidia-h100-80gb"
    assert final["metadata"]["annotations"]["kgwe.io/hourly-cost"]  # the defaulted GPU is charged
    assert admit.mutate(final).patch == [], "a second pass changes nothing"


def test_what_the_pod_sets_is_kept(admit: Admit) -> None:
    pod = _pod("workbench-h100", {"limits": {"nvidia.com/gpu": "2"}, "requests": {"nvidia.com/gpu": "2", "cpu": "8"}},
               labels={QUEUE: "mine"}, containers=2)
    final, _mutated, verdict = admit.create(pod)
    assert verdict.allowed, verdict.message
    first, second = final["spec"]["containers"]
    assert first["resources"] == {"limits": {"nvidia.com/gpu": "2"},
                                  "requests": {"nvidia.com/gpu": "2", "cpu": "8", "memory": "32Gi"}}
    assert "resources" not in second, "only the first container is sized"
    assert final["metadata"]["labels"][QUEUE] == "mine", "a queue the user named is kept"


@pytest.mark.parametrize(
    ("resources", "message"),
    [
        ({"limits": {"nvidia.com/gpu": "3"}},
         'nvidia.com/gpu 3 is above the maximum 2 of hardware profile "workbench-h100"'),
        ({"requests": {"cpu": "500m"}}, 'cpu 500m is below the minimum 1 of hardware profile "workbench-h100"'),
        ({"requests": {"memory": "256Gi"}}, "memory 256Gi is above the maximum 128Gi"),
    ],
)
def test_a_pod_outside_min_max_is_refused_naming_the_bound(admit: Admit, resources: dict[str, Any],
                                                           message: str) -> None:
    final, _mutated, verdict = admit.create(_pod("workbench-h100", resources))
    assert not verdict.allowed
    assert message in verdict.message
    # /mutate writes no placement for a pod it knows is refused, and no defaults either: never half-rewritten.
    assert "nodeSelector" not in final["spec"]
    assert final["spec"]["containers"][0]["resources"] == resources
    assert QUEUE not in (final["metadata"].get("labels") or {})


def test_the_pod_total_is_bounded_across_containers() -> None:
    profile = profile_resources("p", {"resources": {"cpu": {"max": "4"}}})
    pod = _pod("p", containers=2)
    for container in pod["spec"]["containers"]:
        container["resources"] = {"requests": {"cpu": "3"}}
    assert bound_problems(pod, profile) == ['cpu 6 is above the maximum 4 of hardware profile "p"']


def test_malformed_profile_entries_are_left_out() -> None:
    profile = profile_resources("p", {"resources": {"cpu": {"default": "lots", "max": True}, "memory": "8Gi",
                                                    "nvidia.com/gpu": {"default": 2}}, "queue": ""})
    assert [b.resource for b in profile.bounds] == ["nvidia.com/gpu"] and profile.queue is None
    assert missing_defaults(_pod("p"), profile) == {"nvidia.com/gpu": "2"}
    assert missing_defaults(_pod("p", {"limits": {"nvidia.com/mig-1g.10gb": "1"}}), profile) == {}


def test_a_profile_without_resources_or_queue_changes_nothing_new(admit: Admit) -> None:
    final, _mutated, verdict = admit.create(load_pod("03-profile.yaml"))
    assert verdict.allowed
    assert final["spec"]["containers"][0]["resources"] == {"limits": {"nvidia.com/gpu": "1"}}
    assert QUEUE not in (final["metadata"].get("labels") or {})


# -- a MIG profile: the defaulted GPU becomes a slice, and the result passes again unchanged ------------


@pytest.fixture(scope="module")
def mig_runtime(tmp_path_factory: pytest.TempPathFactory) -> Runtime:
    cluster = Path(tmp_path_factory.mktemp("cluster")) / "cluster"
    shutil.copytree(EXAMPLES / "cluster", cluster)
    (cluster / "mig-workbench.yaml").write_text(yaml.safe_dump_all([MIG_PROFILE, OPEN_ROLE, OPEN_BINDING]))
    return build_runtime(load_config(EXAMPLES / "config.yaml"), cluster)


def test_a_defaulted_gpu_is_sliced_like_one_the_user_wrote(mig_runtime: Runtime) -> None:
    admit = Admit(mig_runtime)
    final, _mutated, verdict = admit.create(_pod("mig-workbench"))
    assert verdict.allowed, verdict.message
    assert final["spec"]["containers"][0]["resources"] == {
        "limits": {"nvidia.com/mig-1g.10gb": "1"}, "requests": {"nvidia.com/mig-1g.10gb": "1", "memory": "8Gi"},
    }
    assert final["metadata"]["labels"][QUEUE] == "small"
    assert admit.mutate(final).patch == [], "the slice counts as the profile's one GPU: no second default"


# -- workloads: each template as the pod it makes (SPEC section 7) -----------------------------------------


def _workload_review(obj: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": str(uuid.uuid4()),
            "kind": {"group": "apps", "version": "v1", "kind": "Deployment"},
            "resource": {"group": "apps", "version": "v1", "resource": "deployments"},
            "requestKind": {"group": "apps", "version": "v1", "kind": "Deployment"},
            "requestResource": {"group": "apps", "version": "v1", "resource": "deployments"},
            "name": obj["metadata"]["name"], "namespace": "team-a", "operation": "CREATE",
            "userInfo": {"username": "alice", "groups": ["system:authenticated"]},
            "object": obj, "oldObject": None, "dryRun": False,
        },
    }


def _deployment(gpus: str | None) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "main", "image": "cuda"}
    if gpus is not None:
        container["resources"] = {"limits": {"nvidia.com/gpu": gpus}}
    return {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "nb", "namespace": "team-a"},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "nb"}}, "template": {
            "metadata": {"labels": {"app": "nb"}, "annotations": {"kgwe.io/profile": "workbench-h100"}},
            "spec": {"containers": [container]},
        }},
    }


def test_a_workload_template_gets_the_defaults_and_queue_and_its_pods_pass_unchanged(runtime: Runtime) -> None:
    deployment = _deployment(None)
    answer = runtime.admission.mutate(decode_review(_workload_review(deployment)))
    mutated = jsonpatch.apply_patch(deployment, answer.patch)
    template = mutated["spec"]["template"]
    assert template["spec"]["containers"][0]["resources"] == {
        "limits": {"nvidia.com/gpu": "1"}, "requests": {"cpu": "4", "memory": "32Gi"},
    }
    assert template["metadata"]["labels"][QUEUE] == "notebooks"
    assert runtime.admission.validate(decode_review(_workload_review(mutated))).allowed
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {**copy.deepcopy(template["metadata"]), "name": "nb-0",
                                                           "namespace": "team-a"},
           "spec": copy.deepcopy(template["spec"])}
    admit = Admit(runtime)
    assert admit.mutate(pod).patch == [], "a pod from a mutated template is not rewritten again"
    assert admit.validate(pod).allowed


def test_a_workload_template_outside_the_bounds_is_refused_at_apply(runtime: Runtime) -> None:
    verdict = runtime.admission.validate(decode_review(_workload_review(_deployment("4"))))
    assert not verdict.allowed
    assert verdict.message.startswith('spec.template: nvidia.com/gpu 4 is above the maximum 2 of hardware profile')
