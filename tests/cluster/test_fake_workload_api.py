"""The fake API server's Workload API is the one v1.36 serves (tests/cluster/fake_workload_api.py): the gang
tests trust it, so its discovery, validation, dropped fields, immutability and serialization are held here."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import pytest
from kube_fake_apiserver import FakeApiServer
from kubernetes import client as k8s_client
from kubernetes.client.exceptions import ApiException

from webhook.cluster.kube_json import KubeJson

SCHEDULING = "/apis/scheduling.k8s.io/v1alpha2"
WORKLOADS = f"{SCHEDULING}/namespaces/ml/workloads"
POD_GROUPS = f"{SCHEDULING}/namespaces/ml/podgroups"


def _workload(templates: int = 1, min_count: int = 2, topology: int = 1) -> dict[str, Any]:
    return {"apiVersion": "scheduling.k8s.io/v1alpha2", "kind": "Workload", "metadata": {"name": "train"},
            "spec": {"podGroupTemplates": [
                {"name": f"t{i}", "schedulingPolicy": {"gang": {"minCount": min_count}},
                 "schedulingConstraints": {"topology": [{"key": f"example.com/level-{k}"} for k in range(topology)]}}
                for i in range(templates)]}}


def _pod_group(**spec: Any) -> dict[str, Any]:
    return {"apiVersion": "scheduling.k8s.io/v1alpha2", "kind": "PodGroup", "metadata": {"name": "train-0"},
            "spec": {"podGroupTemplateRef": {"workload": {"workloadName": "train", "podGroupTemplateName": "t0"}},
                     "schedulingPolicy": {"gang": {"minCount": 2}}, **spec}}


def _server(**gates: bool) -> Iterator[tuple[FakeApiServer, KubeJson]]:
    server = FakeApiServer(**gates).start()
    configuration = k8s_client.Configuration()
    configuration.host = server.url
    with k8s_client.ApiClient(configuration) as client:
        yield server, KubeJson(client)
    server.close()


@pytest.fixture
def on() -> Iterator[tuple[FakeApiServer, KubeJson]]:
    yield from _server(workload_api=True, topology_aware=True)


@pytest.fixture
def generic() -> Iterator[tuple[FakeApiServer, KubeJson]]:
    yield from _server(workload_api=True)


@pytest.fixture
def off() -> Iterator[tuple[FakeApiServer, KubeJson]]:
    yield from _server()


def _status(call: Any) -> int:
    with pytest.raises(ApiException) as raised:
        call()
    return int(raised.value.status)


def test_discovery_lists_the_resources_only_with_the_gate_on(on: Any, off: Any) -> None:
    listed = on[1].request("GET", SCHEDULING)
    assert listed["groupVersion"] == "scheduling.k8s.io/v1alpha2"
    assert {r["name"] for r in listed["resources"]} == {"workloads", "podgroups", "podgroups/status"}
    assert all(r["namespaced"] for r in listed["resources"])
    assert _status(lambda: off[1].request("GET", SCHEDULING)) == 404
    assert _status(lambda: off[1].request("POST", POD_GROUPS, body=_pod_group())) == 404


def test_objects_read_back_as_the_go_types_serialize_them(on: Any) -> None:
    api = on[1]
    workload = _workload()
    del workload["spec"]["podGroupTemplates"][0]["schedulingConstraints"]
    created = api.request("POST", WORKLOADS, body=workload)
    assert created["spec"]["podGroupTemplates"][0]["schedulingConstraints"] is None  # no omitempty
    assert created["metadata"]["generation"] == 1 and created["metadata"]["uid"]
    group = _pod_group()
    del group["spec"]["podGroupTemplateRef"]
    read = api.request("POST", POD_GROUPS, body=group)
    assert read["spec"]["podGroupTemplateRef"] is None and read["status"] == {}
    assert api.request("GET", f"{POD_GROUPS}/train-0") == read


@pytest.mark.parametrize("body, problem", [
    (_workload(templates=9), "must have at most 8 items"),
    (_workload(templates=0), "spec.podGroupTemplates: Required value"),
    (_workload(min_count=0), "must be greater than or equal to 1"),
    (_workload(topology=2), "must have at most 1 item"),
    (_pod_group(schedulingPolicy={"gang": {"minCount": 2}, "basic": {}}), "exactly one of"),
    (_pod_group(schedulingPolicy={"gang": {"minCount": -1}}), "must be greater than or equal to 1"),
    (_pod_group(podGroupTemplateRef={"workload": {"workloadName": "train"}}), "podGroupTemplateName: Required"),
])
def test_validation_refuses_what_v1_36_refuses(on: Any, body: dict[str, Any], problem: str) -> None:
    path = WORKLOADS if body["kind"] == "Workload" else POD_GROUPS
    with pytest.raises(ApiException) as raised:
        on[1].request("POST", path, body=body)
    assert raised.value.status == 422 and problem in str(raised.value.body)


def test_topology_constraints_are_dropped_where_their_gate_is_off(generic: Any) -> None:
    api = generic[1]
    assert api.request("POST", WORKLOADS, body=_workload(topology=2))["spec"]["podGroupTemplates"][0][
        "schedulingConstraints"] is None  # dropped before validation: two items are not refused
    group = api.request("POST", POD_GROUPS, body=_pod_group(schedulingConstraints={"topology": [{"key": "x"}]}))
    assert "schedulingConstraints" not in group["spec"]


def test_specs_are_immutable_and_metadata_is_not(on: Any) -> None:
    api = on[1]
    created = api.request("POST", POD_GROUPS, body=_pod_group())
    version = created["metadata"]["resourceVersion"]
    merge = "application/merge-patch+json"
    owners = [{"apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": "u-1"}]
    patched = api.request("PATCH", f"{POD_GROUPS}/train-0", content_type=merge,
                          body={"metadata": {"resourceVersion": version, "ownerReferences": owners}})
    assert patched["metadata"]["ownerReferences"] == owners
    assert _status(lambda: api.request("PATCH", f"{POD_GROUPS}/train-0", content_type=merge, body={
        "metadata": {"resourceVersion": version}, "spec": {"schedulingPolicy": {"gang": {"minCount": 3}}}})) == 409
    assert _status(lambda: api.request("PATCH", f"{POD_GROUPS}/train-0", content_type=merge, body={
        "spec": {"schedulingPolicy": {"gang": {"minCount": 3}}}})) == 422
    assert _status(lambda: api.request("POST", POD_GROUPS, body=_pod_group())) == 409


def _pod(**spec: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ml"},
            "spec": {"containers": [{"name": "c", "image": "busybox"}], **spec}}


def test_a_pods_scheduling_group_is_dropped_at_create_with_the_gate_off_and_immutable_after(
    on: Any, off: Any
) -> None:
    grouped = _pod(schedulingGroup={"podGroupName": "train-0"})
    assert "schedulingGroup" not in off[0].put("Pod", copy.deepcopy(grouped))["spec"]
    stored = on[0].put("Pod", copy.deepcopy(grouped))
    assert stored["spec"]["schedulingGroup"] == {"podGroupName": "train-0"}
    with pytest.raises(ValueError, match="DNS subdomain"):
        on[0].put("Pod", _pod(schedulingGroup={"podGroupName": "Not_A_Name"}) | {
            "metadata": {"name": "q", "namespace": "ml"}})
    assert _status(lambda: on[1].request("PATCH", "/api/v1/namespaces/ml/pods/p",
                                         content_type="application/merge-patch+json",
                                         body={"spec": {"schedulingGroup": {"podGroupName": "other"}}})) == 422
