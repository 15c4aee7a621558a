"""Gangs with kube-scheduler's Workload API (Kubernetes 1.36, `scheduling.k8s.io/v1alpha2`), against the fake API
server serving it as v1.36 does (tests/cluster/fake_workload_api.py), and without it.

Where discovery finds the API, a sized gang's members join its PodGroup at CREATE (`spec.schedulingGroup`), and the
gang controller creates the gang's Workload and PodGroup once, when it releases the gang into the room it chose,
before it pins and ungates the members; admission writes nothing. Where the API is not served, or
`gangs.workloadAPI: off`, gangs go the classic way, unchanged."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from gang_support import (
    Cluster,
    GangApiServer,
    admit,
    clique_of,
    cliques,
    h100_node,
    member,
    replica,
    with_nodes,
)
from kubernetes import client as k8s_client

from webhook.admission.request import decode_review
from webhook.config import Config
from webhook.gangs.native import GROUP_VERSION, TEMPLATE, pod_group_name
from webhook.gangs.view import gangs_view
from webhook.wing_config import Gangs

SCHEDULING = f"/apis/{GROUP_VERSION}"
WORKLOADS = f"{SCHEDULING}/namespaces/ml/workloads"
POD_GROUPS = f"{SCHEDULING}/namespaces/ml/podgroups"
CLIQUE_KEY = "kgwe.io/nvlink-clique"


def _serve(**gates: bool) -> Iterator[tuple[GangApiServer, k8s_client.ApiClient]]:
    server = GangApiServer(**gates).start()
    configuration = k8s_client.Configuration()
    configuration.host = server.url
    with k8s_client.ApiClient(configuration) as client:
        yield server, client
    from gang_support import _sources

    while _sources:
        _sources.pop().stop()
    server.close()


@pytest.fixture
def gates_on() -> Iterator[tuple[GangApiServer, k8s_client.ApiClient]]:
    """GenericWorkload, GangScheduling and TopologyAwareWorkloadScheduling on."""
    yield from _serve(workload_api=True, topology_aware=True)


@pytest.fixture
def generic_only() -> Iterator[tuple[GangApiServer, k8s_client.ApiClient]]:
    """GenericWorkload on, TopologyAwareWorkloadScheduling off (the API server drops topology constraints)."""
    yield from _serve(workload_api=True)


@pytest.fixture
def gates_off() -> Iterator[tuple[GangApiServer, k8s_client.ApiClient]]:
    yield from _serve()


def _native_requests(server: GangApiServer, method: str | None = None) -> list[Any]:
    return [r for r in server.requests if r.path.startswith(SCHEDULING) and r.path != SCHEDULING
            and (method is None or r.method == method)]


def _gang_of_two(cluster: Cluster) -> None:
    cluster.create(member("w-0", "llm", 2))
    cluster.create(member("w-1", "llm", 2))


def test_discovery_finds_the_workload_api_and_a_refresh_sees_it_go(gates_on: Any) -> None:
    server, api = gates_on
    with_nodes(server, cliques(2))
    cluster = replica(server, api)
    model = cluster.store.snapshot(force=True)
    assert model.serves(GROUP_VERSION, "workloads", "podgroups")
    assert model.api_resources[GROUP_VERSION] == {"workloads", "podgroups"}  # podgroups/status is a subresource
    # The API server restarted with the gate off: the next discovery pass says so, and new members join nothing.
    from gang_support import _sources

    server.missing.update({f"{SCHEDULING}/workloads", f"{SCHEDULING}/podgroups"})
    assert _sources[-1].discover_once() == {GROUP_VERSION: None}
    assert not cluster.store.snapshot(force=True).serves(GROUP_VERSION)
    assert "schedulingGroup" not in cluster.create(member("w-0", "llm", 2))["spec"]


def test_a_discovery_that_fails_at_start_lets_the_model_load_the_classic_way_until_it_answers(gates_on: Any) -> None:
    server, api = gates_on
    server.fail_next(SCHEDULING, 500, times=1)
    cluster = replica(server, api)  # loaded although discovery failed: nothing waits on it
    from gang_support import _sources

    server.wait_for(lambda: cluster.store.snapshot(force=True).serves(GROUP_VERSION, "workloads"))  # retried
    assert _sources[-1].tasks[-1].state().failures >= 1


def test_members_join_the_pod_group_and_the_release_creates_workload_and_pod_group_once(gates_on: Any) -> None:
    server, api = gates_on
    nodes = cliques(2, 4)
    with_nodes(server, nodes)
    cluster = replica(server, api)
    controller = cluster.controller()
    name = pod_group_name("llm")
    first = cluster.create(member("w-0", "llm", 2))
    assert first["spec"]["schedulingGroup"] == {"podGroupName": name}
    assert first["spec"]["schedulingGates"] == [{"name": "kgwe.io/gang"}]  # KGWE still pins the room first
    assert controller.reconcile_once() == []
    assert _native_requests(server) == []  # nothing before the release: admission and waiting write no PodGroup
    (row,) = gangs_view(cluster.store.snapshot(force=True), {})["gangs"]
    assert row["podGroup"] == name

    cluster.create(member("w-1", "llm", 2))
    assert [a.kind for a in controller.reconcile_once()] == ["release"]
    clique = clique_of(nodes, "rack0-tray0")  # best fit: the 8-GPU clique
    (workload,) = server.objects("Workload").values()
    assert workload["metadata"]["name"] == name and workload["metadata"]["namespace"] == "ml"
    assert workload["spec"]["podGroupTemplates"] == [{
        "name": TEMPLATE, "schedulingPolicy": {"gang": {"minCount": 2}},
        "schedulingConstraints": {"topology": [{"key": CLIQUE_KEY}]},
    }]
    (group,) = server.objects("PodGroup").values()
    assert group["metadata"]["name"] == name
    assert group["spec"] == {
        "podGroupTemplateRef": {"workload": {"workloadName": name, "podGroupTemplateName": TEMPLATE}},
        "schedulingPolicy": {"gang": {"minCount": 2}},
        "schedulingConstraints": {"topology": [{"key": CLIQUE_KEY}]},
    }
    assert group["status"] == {}
    # Bare pods own them: garbage collection removes them when the last member is gone.
    for obj in (workload, group):
        owners = obj["metadata"]["ownerReferences"]
        assert sorted(o["name"] for o in owners) == ["w-0", "w-1"]
        assert all(o["kind"] == "Pod" and o["uid"] == server.pod(f"ml/{o['name']}")["metadata"]["uid"] for o in owners)
    # Order: the Workload, the PodGroup, then pins and gates.
    writes = [(r.method, r.path) for r in server.requests if r.method in ("POST", "PATCH")
              and (r.path.startswith(SCHEDULING) or "/pods/" in r.path)]
    assert writes[:2] == [("POST", WORKLOADS), ("POST", POD_GROUPS)]
    for key in ("ml/w-0", "ml/w-1"):
        pod = server.pod(key)
        assert "schedulingGates" not in pod["spec"]
        assert pod["spec"]["nodeSelector"][CLIQUE_KEY] == clique
        assert pod["spec"]["schedulingGroup"] == {"podGroupName": name}
    released = [e for e in server.events if e["reason"] == "GangReleased"]
    assert all(f"PodGroup {name}" in e["message"] for e in released) and len(released) == 2
    cluster.schedule("ml/w-0", "rack0-tray0")
    cluster.schedule("ml/w-1", "rack0-tray1")
    controller.reconcile_once()
    assert server.ledger_records() == []
    assert len(_native_requests(server, "POST")) == 2  # created once


def test_a_new_leader_finishing_a_release_creates_nothing_twice(gates_on: Any) -> None:
    server, api = gates_on
    with_nodes(server, cliques(2))
    cluster = replica(server, api)
    _gang_of_two(cluster)
    # The first leader creates both objects, then the API server fails its pin: nothing is ungated.
    server.fail_next("/api/v1/namespaces/ml/pods/w-0", 500)
    cluster.controller().reconcile_once()
    assert cluster.gated() == {"ml/w-0", "ml/w-1"}
    assert len(server.objects("Workload")) == 1 and len(server.objects("PodGroup")) == 1
    uids = {o["metadata"]["uid"] for kind in ("Workload", "PodGroup") for o in server.objects(kind).values()}

    successor = replica(server, api).controller()
    assert [a.kind for a in successor.reconcile_once()] == ["release"]
    assert cluster.gated() == set()
    assert {o["metadata"]["uid"] for kind in ("Workload", "PodGroup") for o in server.objects(kind).values()} == uids
    assert _native_requests(server, "DELETE") == []
    assert _native_requests(server, "PATCH") == []  # same owners: nothing to change


def test_without_topology_aware_scheduling_the_server_drops_the_constraint_and_it_still_suits(
    generic_only: Any,
) -> None:
    server, api = generic_only
    with_nodes(server, cliques(2))
    cluster = replica(server, api)
    server.fail_next("/api/v1/namespaces/ml/pods/w-1", 500)  # a second pass must read the objects back
    _gang_of_two(cluster)
    cluster.controller().reconcile_once()
    cluster.sync()  # the second pass judges the pods as the first left them (the watch lags on a busy machine)
    cluster.controller().reconcile_once()
    assert cluster.gated() == set()
    (workload,) = server.objects("Workload").values()
    # As v1.36 serializes a template whose constraints were dropped (no omitempty on the field).
    assert workload["spec"]["podGroupTemplates"] == [
        {"name": TEMPLATE, "schedulingPolicy": {"gang": {"minCount": 2}}, "schedulingConstraints": None}]
    (group,) = server.objects("PodGroup").values()
    assert "schedulingConstraints" not in group["spec"]
    assert _native_requests(server, "DELETE") == []


def test_without_the_workload_api_gangs_go_the_classic_way(gates_off: Any) -> None:
    server, api = gates_off
    nodes = cliques(2)
    with_nodes(server, nodes)
    cluster = replica(server, api)
    assert not cluster.store.snapshot(force=True).api_resources
    _gang_of_two(cluster)
    assert all("schedulingGroup" not in server.pod(k)["spec"] for k in ("ml/w-0", "ml/w-1"))
    assert [a.kind for a in cluster.controller().reconcile_once()] == ["release"]
    assert cluster.gated() == set()
    assert all(server.pod(k)["spec"]["nodeSelector"][CLIQUE_KEY] == clique_of(nodes, "rack0-tray0")
               for k in ("ml/w-0", "ml/w-1"))
    assert _native_requests(server) == []  # discovery's one 404, nothing else
    assert [r.method for r in server.requests if r.path == SCHEDULING] == ["GET"]


def test_the_setting_off_keeps_the_classic_way_where_the_api_is_served(gates_on: Any) -> None:
    server, api = gates_on
    with_nodes(server, cliques(2))
    config = Config(gangs=Gangs(waitWarningSeconds=120, timeoutSeconds=600, workloadAPI="off"))
    cluster = replica(server, api, config)
    _gang_of_two(cluster)
    assert all("schedulingGroup" not in server.pod(k)["spec"] for k in ("ml/w-0", "ml/w-1"))
    cluster.controller().reconcile_once()
    assert cluster.gated() == set()
    assert server.objects("Workload") == {} and server.objects("PodGroup") == {}


def test_a_forged_or_refused_member_creates_nothing(gates_on: Any) -> None:
    server, api = gates_on
    with_nodes(server, cliques(2))
    cluster = replica(server, api)
    # Reviews no pod follows (a forged one, a dry run): the answer names the PodGroup, and nothing is written.
    for dry_run in (False, True):
        outcome = admit(cluster.runtime, member("w-0", "ghost", 2), dry_run=dry_run)
        assert outcome.allowed and outcome.pod["spec"]["schedulingGroup"] == {"podGroupName": pod_group_name("ghost")}
    assert cluster.controller().reconcile_once() == []
    assert _native_requests(server) == [] and server.ledger_records() == []


def test_only_a_gangs_members_join_its_pod_group(gates_on: Any) -> None:
    server, api = gates_on
    with_nodes(server, cliques(2))
    cluster = replica(server, api)
    stranger = member("spy", "other", 2)
    stranger["spec"]["schedulingGroup"] = {"podGroupName": pod_group_name("llm")}
    refused = admit(cluster.runtime, stranger)
    assert not refused.allowed and "only that gang's members join it" in refused.message
    plain = member("plain", "llm", None, accelerator=None)  # no kgwe.io/gang-size
    del plain["metadata"]["annotations"]["kgwe.io/gang"]
    plain["spec"]["schedulingGroup"] = {"podGroupName": pod_group_name("llm")}
    verdict = cluster.runtime.admission.validate(decode_review(_review(plain)))
    assert not verdict.allowed


def test_a_member_naming_its_own_pod_group_keeps_it_and_kgwe_creates_none(gates_on: Any) -> None:
    """The Job controller with WorkloadWithJob (or any workload controller) makes the PodGroup itself."""
    server, api = gates_on
    with_nodes(server, cliques(2))
    cluster = replica(server, api)
    for index in range(2):
        pod = member(f"w-{index}", "llm", 2)
        pod["spec"]["schedulingGroup"] = {"podGroupName": "train-job-0"}
        assert cluster.create(pod)["spec"]["schedulingGroup"] == {"podGroupName": "train-job-0"}
    cluster.controller().reconcile_once()
    assert cluster.gated() == set()  # pinned and released by KGWE; the controller's PodGroup does the rest
    assert _native_requests(server) == []


def test_a_new_run_of_another_size_replaces_the_pod_group_it_cannot_use(gates_on: Any) -> None:
    server, api = gates_on
    with_nodes(server, cliques(4))
    cluster = replica(server, api)
    controller = cluster.controller()
    _gang_of_two(cluster)
    controller.reconcile_once()
    old = {kind: next(iter(server.objects(kind).values()))["metadata"]["uid"] for kind in ("Workload", "PodGroup")}
    for key in ("ml/w-0", "ml/w-1"):  # the job is deleted; its PodGroup outlives it until garbage collection
        cluster.delete(key)
    controller.reconcile_once()
    for index in range(3):
        cluster.create(member(f"v-{index}", "llm", 3))
    assert [a.kind for a in controller.reconcile_once()] == ["release"]
    for kind in ("Workload", "PodGroup"):
        (obj,) = server.objects(kind).values()
        assert obj["metadata"]["uid"] != old[kind]
        assert sorted(o["name"] for o in obj["metadata"]["ownerReferences"]) == ["v-0", "v-1", "v-2"]
    (group,) = server.objects("PodGroup").values()
    assert group["spec"]["schedulingPolicy"] == {"gang": {"minCount": 3}}
    deletes = _native_requests(server, "DELETE")
    assert len(deletes) == 2 and all(r.body["preconditions"]["uid"] in old.values() for r in deletes)


def test_members_owned_by_a_job_give_the_objects_that_owner(gates_on: Any) -> None:
    server, api = gates_on
    with_nodes(server, [h100_node("dgx-0")])
    cluster = replica(server, api)
    job = {"apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": "0b5e-job", "controller": True,
           "blockOwnerDeletion": True}
    for index in range(2):
        pod = member(f"train-{index}", "train", 2, accelerator="nvidia-h100-80gb")
        pod["metadata"]["ownerReferences"] = [job]
        cluster.create(pod)
    cluster.controller().reconcile_once()
    assert cluster.gated() == set()
    (workload,) = server.objects("Workload").values()
    assert workload["metadata"]["ownerReferences"] == [
        {"apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": "0b5e-job"}]
    assert workload["spec"]["controllerRef"] == {"apiGroup": "batch", "kind": "Job", "name": "train"}
    # One node's NVLink domain is the room: its topology key is the hostname.
    assert workload["spec"]["podGroupTemplates"][0]["schedulingConstraints"] == {
        "topology": [{"key": "kubernetes.io/hostname"}]}
    assert server.pod("ml/train-0")["spec"]["nodeSelector"]["kubernetes.io/hostname"] == "dgx-0"


def test_a_gang_admitted_across_the_apis_arrival_counts_only_the_members_that_wait_for_it(gates_on: Any) -> None:
    """A member admitted before discovery found the API names no PodGroup; kube-scheduler would wait forever for a
    minCount its group cannot reach, so minCount counts the members that name it (KGWE still releases all)."""
    server, api = gates_on
    with_nodes(server, cliques(4))
    from gang_support import _sources

    server.missing.update({f"{SCHEDULING}/workloads", f"{SCHEDULING}/podgroups"})
    cluster = replica(server, api)
    assert "schedulingGroup" not in cluster.create(member("w-0", "llm", 3))["spec"]
    server.missing.clear()
    _sources[-1].discover_once()
    cluster.create(member("w-1", "llm", 3))
    cluster.create(member("w-2", "llm", 3))
    cluster.controller().reconcile_once()
    assert cluster.gated() == set()
    (group,) = server.objects("PodGroup").values()
    assert group["spec"]["schedulingPolicy"] == {"gang": {"minCount": 2}}


def test_a_pod_group_the_api_server_refuses_keeps_the_gang_gated(gates_on: Any) -> None:
    server, api = gates_on
    with_nodes(server, cliques(2))
    cluster = replica(server, api)
    _gang_of_two(cluster)
    server.fail_next(POD_GROUPS, 500)
    cluster.controller().reconcile_once()
    assert cluster.gated() == {"ml/w-0", "ml/w-1"}  # never pods waiting on a PodGroup that is not there
    assert not any("/pods/" in r.path for r in server.requests if r.method == "PATCH")
    cluster.controller().reconcile_once()  # the next pass finishes the release
    assert cluster.gated() == set() and len(server.objects("PodGroup")) == 1


def _review(pod: dict[str, Any]) -> dict[str, Any]:
    from gang_support import review

    return review(pod)
