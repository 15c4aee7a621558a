"""The typed views of pods and nodes (policies/vocabulary/objects.py): live, never copying, never raising."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from policies.vocabulary.nodes import NodeView
from policies.vocabulary.objects import EMPTY, ObjectView, PodView, object_view, pod_view, string_map


def _pod() -> dict[str, Any]:
    # As the API server sends it in an AdmissionReview (a Job's pod, before a name is given).
    return orjson.loads(
        b"""{
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "generateName": "train-", "namespace": "ml", "uid": "u-1", "resourceVersion": "42",
            "generation": 3, "creationTimestamp": "2026-01-02T03:04:05Z",
            "labels": {"app": "train", "kgwe.io/gang": "g1"},
            "annotations": {"kgwe.io/accelerator": "h100-80gb"},
            "ownerReferences": [
                {"apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": "j-1", "controller": true}
            ],
            "finalizers": ["batch.kubernetes.io/job-tracking"]
        },
        "spec": {
            "nodeName": "gpu-1", "nodeSelector": {"kgwe.io/accelerator-type": "h100-80gb"},
            "schedulingGates": [{"name": "kgwe.io/gang"}],
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
            "affinity": {"nodeAffinity": {}},
            "resourceClaims": [{"name": "kgwe-gpu", "resourceClaimTemplateName": "t"}],
            "serviceAccountName": "trainer", "schedulerName": "default-scheduler", "priorityClassName": "high",
            "containers": [{
                "name": "main", "image": "pytorch:2",
                "resources": {
                    "limits": {"nvidia.com/gpu": "2"}, "requests": {"cpu": "4"}, "claims": [{"name": "kgwe-gpu"}]
                },
                "env": [{"name": "A", "value": "1"}]
            }],
            "initContainers": [{"name": "proxy", "restartPolicy": "Always"}, {"name": "setup"}]
        },
        "status": {"phase": "Running"}
    }"""
    )


def test_a_well_formed_pod_reads_as_written() -> None:
    raw = _pod()
    pod = PodView(raw)
    assert (pod.api_version, pod.kind) == ("v1", "Pod")
    assert (pod.name, pod.generate_name, pod.namespace, pod.uid) == ("", "train-", "ml", "u-1")
    assert (pod.resource_version, pod.generation, pod.creation_timestamp) == ("42", 3, "2026-01-02T03:04:05Z")
    assert pod.labels == {"app": "train", "kgwe.io/gang": "g1"}
    assert pod.annotations == {"kgwe.io/accelerator": "h100-80gb"}
    assert pod.label("app") == "train" and pod.label("missing") is None
    assert pod.annotation("kgwe.io/accelerator") == "h100-80gb"
    owner = pod.controller_owner
    assert owner is not None and owner["kind"] == "Job"
    assert pod.finalizers == ("batch.kubernetes.io/job-tracking",)
    assert pod.node_name == "gpu-1"
    assert pod.node_selector == {"kgwe.io/accelerator-type": "h100-80gb"}
    assert pod.scheduling_gates == ("kgwe.io/gang",)
    assert pod.tolerations[0]["key"] == "nvidia.com/gpu"
    assert pod.affinity == {"nodeAffinity": {}}
    assert pod.resource_claims[0]["name"] == "kgwe-gpu"
    assert (pod.service_account_name, pod.scheduler_name, pod.priority_class_name) == (
        "trainer", "default-scheduler", "high",
    )
    (main,) = pod.containers
    assert (main.name, main.image) == ("main", "pytorch:2")
    assert main.limits == {"nvidia.com/gpu": "2"} and main.requests == {"cpu": "4"}
    assert main.claims == ({"name": "kgwe-gpu"},)
    assert main.env == ({"name": "A", "value": "1"},)
    assert [(c.name, c.is_sidecar) for c in pod.init_containers] == [("proxy", True), ("setup", False)]
    assert [c.name for c in pod.all_containers] == ["main", "proxy", "setup"]
    assert (pod.phase, pod.terminal, pod.deleting) == ("Running", False, False)


def test_the_view_wraps_the_dict_and_sees_changes_made_after_it_was_built() -> None:
    raw = _pod()
    pod = PodView(raw)
    assert pod.raw is raw
    # Well-formed maps are the object's own dicts: reading allocates and copies nothing.
    assert pod.labels is raw["metadata"]["labels"]
    assert pod.containers[0].raw is raw["spec"]["containers"][0]
    # The mutation pipeline edits the pod in place; the view reads it live.
    raw["metadata"]["annotations"]["kgwe.io/tenant"] = "team-a"
    raw["spec"]["nodeSelector"] = {"zone": "a"}
    raw["metadata"]["deletionTimestamp"] = "2026-01-02T04:00:00Z"
    raw["status"]["phase"] = "Succeeded"
    assert pod.annotation("kgwe.io/tenant") == "team-a"
    assert pod.node_selector == {"zone": "a"}
    assert pod.deleting and pod.terminal


HOSTILE: list[Any] = [None, "a string", 7, 1.5, True, ["a", "list"], {"a": "mapping"}]


@pytest.mark.parametrize("junk", HOSTILE)
def test_every_part_of_the_wrong_type_reads_as_empty(junk: Any) -> None:
    """Whatever a forged request puts anywhere, no property raises, and wrong types read as empty."""
    parts = {
        "metadata": junk,
        "spec": junk,
        "status": junk,
    }
    pod = PodView(parts)
    _read_everything(pod)
    meta_parts = {
        key: junk
        for key in ("name", "namespace", "uid", "labels", "annotations", "ownerReferences", "finalizers",
                    "generation", "deletionTimestamp", "resourceVersion", "generateName", "creationTimestamp")
    }
    spec_parts = {
        key: junk
        for key in ("nodeName", "nodeSelector", "schedulingGates", "tolerations", "affinity", "resourceClaims",
                    "containers", "initContainers", "ephemeralContainers", "serviceAccountName")
    }
    pod = PodView({"metadata": meta_parts, "spec": spec_parts, "status": {"phase": junk}})
    _read_everything(pod)
    if not isinstance(junk, str):
        assert pod.name == pod.namespace == pod.node_name == pod.phase == ""
    if not isinstance(junk, list):
        assert pod.containers == pod.init_containers == pod.owner_references == pod.tolerations == ()
        assert pod.scheduling_gates == pod.finalizers == ()
    if not isinstance(junk, dict):
        assert pod.labels == pod.annotations == pod.node_selector == pod.affinity == {}
    node = NodeView({"spec": {"taints": junk, "unschedulable": junk}, "status": {"allocatable": junk, "capacity": junk,
                                                                               "conditions": junk}})
    _read_everything(node)
    assert node.unschedulable is bool(junk)  # in doubt, cordoned


def _read_everything(view: ObjectView) -> None:
    for cls in type(view).__mro__:
        for name, attribute in vars(cls).items():
            if isinstance(attribute, property):
                getattr(view, name)
    view.label("k")
    view.annotation("k")
    repr(view)
    if isinstance(view, PodView):
        for container in view.all_containers + view.ephemeral_containers:
            for name, attribute in vars(type(container)).items():
                if isinstance(attribute, property):
                    getattr(container, name)
    if isinstance(view, NodeView):
        view.condition("Ready")


def test_metadata_a_list_is_no_metadata() -> None:
    pod = PodView({"metadata": [{"name": "x"}], "spec": {"containers": {"main": {"name": "main"}}}})
    assert pod.metadata is EMPTY and pod.name == "" and pod.labels == {}
    assert pod.containers == ()  # containers as a mapping: none


def test_items_that_are_not_objects_are_left_out_of_lists() -> None:
    pod = PodView({
        "metadata": {"ownerReferences": ["Job/x", {"kind": "Job", "controller": "true"}, None]},
        "spec": {
            "containers": ["main", {"name": "gpu", "resources": {"limits": ["nvidia.com/gpu"]}}, 3],
            "schedulingGates": [{"name": "a"}, {"name": 5}, "b", {}],
            "tolerations": [None, {"key": "k"}],
        },
    })
    assert [c.name for c in pod.containers] == ["gpu"]
    assert pod.containers[0].limits == {}  # limits a list: no limits
    assert pod.scheduling_gates == ("a",)
    assert pod.tolerations == ({"key": "k"},)
    # `controller: "true"` (a string) is not the boolean the API server writes: no controller.
    assert pod.controller_owner is None and len(pod.owner_references) == 1


def test_labels_with_values_that_are_not_strings_keep_only_their_string_entries() -> None:
    labels: dict[Any, Any] = {"app": "x", "count": 3, "flag": True, "nested": {"a": "b"}, "none": None, 7: "seven"}
    pod = PodView({"metadata": {"labels": labels, "annotations": {"note": ["a"]}}, "spec": {"nodeSelector": labels}})
    assert pod.labels == {"app": "x"}
    assert pod.node_selector == {"app": "x"}
    assert pod.annotations == {}
    assert pod.label("count") is None and pod.label("app") == "x"
    assert pod.annotation("note") is None
    assert labels["count"] == 3  # the object itself is never changed


def test_a_key_decides_scope_whatever_its_value() -> None:
    assert PodView({"metadata": {"labels": {"kgwe.io/gang": 5}}}).has_key_with_prefix("kgwe.io/")
    assert PodView({"metadata": {"annotations": {"kgwe.io/x": None}}}).has_key_with_prefix("kgwe.io/")
    assert not PodView({"metadata": {"labels": {"app": "kgwe.io/x"}}}).has_key_with_prefix("kgwe.io/")
    assert not PodView({"metadata": {"labels": ["kgwe.io/x"]}}).has_key_with_prefix("kgwe.io/")


def test_generation_must_be_an_integer() -> None:
    assert ObjectView({"metadata": {"generation": True}}).generation is None
    assert ObjectView({"metadata": {"generation": "3"}}).generation is None
    assert ObjectView({"metadata": {"generation": 3}}).generation == 3


def test_not_a_dict_at_all_is_an_empty_object() -> None:
    junks: list[Any] = [None, [], "pod", 3]
    for junk in junks:
        view = PodView(junk)
        assert view.raw is EMPTY and view.name == "" and view.containers == ()


def test_empty_answers_cannot_be_written_into() -> None:
    pod = PodView({})
    with pytest.raises(TypeError):
        pod.labels["kgwe.io/tenant"] = "forged"  # type: ignore[index]


def test_node_view_reads_taints_resources_and_conditions() -> None:
    node = NodeView({
        "metadata": {"name": "gpu-1", "labels": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}},
        "spec": {"unschedulable": True, "taints": [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}, "junk"]},
        "status": {
            "capacity": {"nvidia.com/gpu": "8"},
            "conditions": [{"type": "Ready", "status": "True"}, {"type": "MemoryPressure", "status": 1}],
        },
    })
    assert node.name == "gpu-1" and node.unschedulable
    assert node.taints == ({"key": "nvidia.com/gpu", "effect": "NoSchedule"},)
    # No allocatable: the capacity stands in (as node_facts reads it).
    assert node.allocatable == {"nvidia.com/gpu": "8"}
    assert node.condition("Ready") == "True"
    assert node.condition("MemoryPressure") is None and node.condition("DiskPressure") is None


def test_helpers_take_a_view_or_a_dict() -> None:
    raw = _pod()
    view = PodView(raw)
    assert pod_view(view) is view
    assert pod_view(raw).raw is raw
    assert object_view(view) is view
    assert object_view(raw).name == ""
    assert string_map({"a": "b"}) == {"a": "b"}
