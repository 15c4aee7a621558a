"""The gang controller against the fake API server: it records a gang from the members that exist; gates come
off only when the whole gang exists and its room has space; a gang waits gated (holding no GPU), is re-planned,
reports why, and its record goes away when it binds, times out or its pods are deleted; a new leader picks up
where the old one stopped; two replicas that both believe they lead never promise the same room."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from gang_support import (
    H100,
    LEDGER_PATH,
    GangApiServer,
    admit,
    api,  # noqa: F401  (fixture)
    bind,
    clique_of,
    cliques,
    gang_apiserver,  # noqa: F401  (fixture)
    h100_node,
    member,
    replica,
    with_nodes,
)
from kubernetes import client as k8s_client
from prometheus_client import REGISTRY

from webhook.cluster.kube_json import KubeJson
from webhook.cluster.model import object_key
from webhook.gangs.controller import GangController, kube_pod_writer
from webhook.gangs.ledger import GangStoreUnavailable, KubeGangStore, Versioned


def test_gates_come_off_only_when_the_gang_is_complete_then_the_record_goes_when_bound(
    gang_apiserver: GangApiServer, api: k8s_client.ApiClient  # noqa: F811
) -> None:
    nodes = cliques(4)
    with_nodes(gang_apiserver, nodes)
    cluster = replica(gang_apiserver, api)
    controller = cluster.controller()
    cluster.create(member("w-0", "llm", 3))
    cluster.create(member("w-1", "llm", 3))
    assert controller.reconcile_once() == []
    assert cluster.gated() == {"ml/w-0", "ml/w-1"}
    (record,) = gang_apiserver.ledger_records()
    assert record["reason"] == "2 of 3 members exist"

    cluster.create(member("w-2", "llm", 3))
    actions = controller.reconcile_once()
    assert [a.kind for a in actions] == ["release"]
    clique = clique_of(nodes, "rack0-tray0")
    for key in ("ml/w-0", "ml/w-1", "ml/w-2"):
        pod = gang_apiserver.pod(key)
        assert "schedulingGates" not in pod["spec"]
        assert pod["spec"]["nodeSelector"]["kgwe.io/nvlink-clique"] == clique
    (record,) = gang_apiserver.ledger_records()
    assert "releasedAt" in record and record["room"]["value"] == clique
    patches = [r for r in gang_apiserver.requests if r.method == "PATCH"]
    assert all(r.body["metadata"]["resourceVersion"] for r in patches)  # never a blind write
    released = [e for e in gang_apiserver.events if e["reason"] == "GangReleased"]
    assert sorted(e["involvedObject"]["name"] for e in released) == ["w-0", "w-1", "w-2"]
    assert all(e["type"] == "Normal" and clique in e["message"] for e in released)

    for index in range(3):
        cluster.schedule(f"ml/w-{index}", f"rack0-tray{index}")
    controller.reconcile_once()
    assert gang_apiserver.ledger_records() == []


def test_a_complete_gang_without_room_waits_gated_says_why_and_is_replanned(
    gang_apiserver: GangApiServer, api: k8s_client.ApiClient  # noqa: F811
) -> None:
    nodes = cliques(2)
    with_nodes(gang_apiserver, nodes)
    cluster = replica(gang_apiserver, api)
    controller = cluster.controller()
    cluster.create(member("w-0", "llm", 2))
    cluster.create(member("w-1", "llm", 2))
    # Another workload takes a tray of the promised clique before the gang starts.
    gang_apiserver.put("Pod", bind(member("squatter", "none", None, accelerator=None), "rack0-tray1"))
    cluster.sync()
    controller.reconcile_once()
    assert cluster.gated() == {"ml/w-0", "ml/w-1"}  # nothing half placed, no GPU held
    (record,) = gang_apiserver.ledger_records()
    assert "4 GPUs short" in record["reason"] and record["shortGPUs"] == 4

    # New capacity: a second clique appears; the waiting gang moves there and starts.
    more = cliques(3, prefix="new")
    with_nodes(gang_apiserver, more)
    cluster.server.wait_for(lambda: "new0-tray2" in cluster.store.snapshot(force=True).nodes)
    controller.reconcile_once()
    assert cluster.gated() == set()
    moved = clique_of(more, "new0-tray0")
    assert gang_apiserver.pod("ml/w-0")["spec"]["nodeSelector"]["kgwe.io/nvlink-clique"] == moved


def test_a_member_deleted_while_gated_keeps_the_gang_waiting_and_deleting_all_drops_the_record(
    gang_apiserver: GangApiServer, api: k8s_client.ApiClient  # noqa: F811
) -> None:
    with_nodes(gang_apiserver, cliques(4))
    cluster = replica(gang_apiserver, api)
    controller = cluster.controller()
    for index in range(3):
        cluster.create(member(f"w-{index}", "llm", 4))
    cluster.delete("ml/w-1")
    controller.reconcile_once()
    assert cluster.gated() == {"ml/w-0", "ml/w-2"}
    assert gang_apiserver.ledger_records()[0]["reason"] == "2 of 4 members exist"
    cluster.delete("ml/w-0")
    cluster.delete("ml/w-2")
    controller.reconcile_once()
    # Records are made from pods that exist, and kept only while their gang has a live member.
    assert gang_apiserver.ledger_records() == []


def test_an_incomplete_gang_past_the_timeout_releases_its_promise(
    gang_apiserver: GangApiServer, api: k8s_client.ApiClient  # noqa: F811
) -> None:
    with_nodes(gang_apiserver, cliques(2))
    cluster = replica(gang_apiserver, api)
    controller = cluster.controller()
    cluster.create(member("a-0", "a", 2))  # promised the only clique, but its second member never comes
    cluster.create(member("b-0", "b", 2))
    cluster.create(member("b-1", "b", 2))
    controller.reconcile_once()
    assert cluster.gated() == {"ml/a-0", "ml/b-0", "ml/b-1"}  # b waits behind a's promise
    cluster.clock.offset = 700  # past gangs.timeoutSeconds
    controller.reconcile_once()
    assert cluster.gated() == {"ml/a-0"}
    record = next(r for r in gang_apiserver.ledger_records() if r["gang"] == "a")
    assert record["expired"] is True and "no longer held" in record["reason"]


def test_a_gang_waiting_too_long_gets_an_event_and_a_metric(
    gang_apiserver: GangApiServer, api: k8s_client.ApiClient  # noqa: F811
) -> None:
    with_nodes(gang_apiserver, cliques(2))
    cluster = replica(gang_apiserver, api)
    controller = cluster.controller()
    cluster.create(member("w-0", "llm", 2))
    controller.reconcile_once()
    assert gang_apiserver.events == []
    cluster.clock.offset = 130  # past gangs.waitWarningSeconds
    controller.reconcile_once()
    (event,) = gang_apiserver.events
    assert event["involvedObject"]["name"] == "w-0" and event["reason"] == "GangWaiting"
    assert "1 of 2 members exist" in event["message"]
    assert REGISTRY.get_sample_value("kgwe_gang_waiting_too_long", {"namespace": "ml"}) == 1
    controller.reconcile_once()
    assert len(gang_apiserver.events) == 1  # once per wait, not every pass


def test_a_new_leader_finishes_a_release_the_old_one_committed(
    gang_apiserver: GangApiServer, api: k8s_client.ApiClient  # noqa: F811
) -> None:
    nodes = cliques(2, 4)
    with_nodes(gang_apiserver, nodes)
    cluster = replica(gang_apiserver, api)
    cluster.create(member("w-0", "llm", 2))
    cluster.create(member("w-1", "llm", 2))
    # The old leader commits the release in the ledger and stops before touching a pod.
    cluster.controller(writer=False).reconcile_once()
    assert "releasedAt" in gang_apiserver.ledger_records()[0]
    assert cluster.gated() == {"ml/w-0", "ml/w-1"}
    # A new leader (another replica, its own model and store clients) picks the record up.
    successor = replica(gang_apiserver, api)
    successor.controller().reconcile_once()
    assert cluster.gated() == set()
    clique = clique_of(nodes, "rack0-tray0")
    assert {gang_apiserver.pod(k)["spec"]["nodeSelector"]["kgwe.io/nvlink-clique"] for k in ("ml/w-0", "ml/w-1")} == {
        clique
    }


def test_other_scheduling_gates_are_kept(
    gang_apiserver: GangApiServer, api: k8s_client.ApiClient  # noqa: F811
) -> None:
    with_nodes(gang_apiserver, cliques(2))
    cluster = replica(gang_apiserver, api)
    pod = member("w-0", "solo", 1)
    pod["spec"]["schedulingGates"] = [{"name": "example.com/quota"}]
    cluster.create(pod)
    cluster.controller().reconcile_once()
    assert gang_apiserver.pod("ml/w-0")["spec"]["schedulingGates"] == [{"name": "example.com/quota"}]


class RacingStore(KubeGangStore):
    """Both controllers read before either writes: the race the compare-and-swap must settle."""

    def __init__(self, custom_objects: Any, barrier: threading.Barrier) -> None:
        super().__init__(custom_objects)
        self.barrier = barrier
        self.first = True

    def read(self, *, timeout: float | None = None) -> Versioned:
        found = super().read(timeout=timeout)
        if self.first:
            self.first = False
            self.barrier.wait(10)
        return found


def test_two_replicas_that_both_believe_they_lead_never_promise_the_same_room(
    gang_apiserver: GangApiServer, api: k8s_client.ApiClient  # noqa: F811
) -> None:
    # A Lease handover: the old leader's pass has not ended when the new one's begins.
    nodes = cliques(2, 4)  # an 8-GPU and a 16-GPU clique
    with_nodes(gang_apiserver, nodes)
    barrier = threading.Barrier(2)
    replicas = [replica(gang_apiserver, api) for _ in range(2)]
    replicas[0].create(member("a-0", "a", 2))  # one member of each gang exists: both gangs are promised rooms
    replicas[0].create(member("b-0", "b", 2))
    for one in replicas:
        one.sync()
    controllers = [
        GangController(one.store, RacingStore(KubeJson(api), barrier), one.config,
                       kube_pod_writer(api), clock=one.clock)
        for one in replicas
    ]
    threads = [threading.Thread(target=controller.reconcile_once) for controller in controllers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(20)
    records = {r["gang"]: r["room"]["value"] for r in gang_apiserver.ledger_records()}
    assert set(records) == {"a", "b"}
    assert records["a"] != records["b"]
    assert {records["a"], records["b"]} == {clique_of(nodes, "rack0-tray0"), clique_of(nodes, "rack1-tray0")}
    creates = [r for r in gang_apiserver.requests if r.method == "POST" and r.path.endswith("/gangledgers")]
    assert len(creates) == 2  # both tried to create the ledger; one lost with 409, read again and had nothing to add


def test_a_ledger_the_api_server_cannot_serve_changes_nothing_and_the_next_pass_plans_the_gang(
    gang_apiserver: GangApiServer, api: k8s_client.ApiClient  # noqa: F811
) -> None:
    nodes = cliques(2)
    with_nodes(gang_apiserver, nodes)
    cluster = replica(gang_apiserver, api)
    controller = cluster.controller()
    cluster.create(member("w-0", "llm", 2))
    cluster.create(member("w-1", "llm", 2))
    gang_apiserver.fail_next(LEDGER_PATH + "/kgwe-gangs", 503, times=50)
    with pytest.raises(GangStoreUnavailable):
        controller.reconcile_once()
    assert cluster.gated() == {"ml/w-0", "ml/w-1"}  # no record, no release: the gate holds the gang
    assert gang_apiserver.ledger_records() == []
    gang_apiserver.failures.clear()
    controller.reconcile_once()
    assert cluster.gated() == set()
    (record,) = gang_apiserver.ledger_records()
    assert record["room"]["value"] == clique_of(nodes, "rack0-tray0") and record["gpusPerPod"] == 4


def test_a_gang_in_one_nodes_nvlink_domain_is_pinned_to_that_node(
    gang_apiserver: GangApiServer, api: k8s_client.ApiClient  # noqa: F811
) -> None:
    with_nodes(gang_apiserver, [h100_node("dgx-1"), h100_node("dgx-2")])
    gang_apiserver.put("Pod", bind(member("busy", "none", None, gpus=4, accelerator=None), "dgx-1"))
    cluster = replica(gang_apiserver, api)
    for index in range(2):
        cluster.create(member(f"w-{index}", "pair", 2, gpus=2, accelerator=H100))
    cluster.controller().reconcile_once()
    assert cluster.gated() == set()
    for index in range(2):
        # dgx-1 has exactly the 4 GPUs left: best fit keeps dgx-2 whole for a bigger gang.
        assert gang_apiserver.pod(f"ml/w-{index}")["spec"]["nodeSelector"]["kubernetes.io/hostname"] == "dgx-1"


def test_a_replaced_member_joins_the_members_that_run_in_their_clique(
    gang_apiserver: GangApiServer, api: k8s_client.ApiClient  # noqa: F811
) -> None:
    nodes = cliques(2, 4)  # an 8-GPU and a 16-GPU clique
    with_nodes(gang_apiserver, nodes)
    gang_apiserver.put("Pod", bind(member("busy", "none", None, accelerator=None), "rack0-tray0"))
    cluster = replica(gang_apiserver, api)
    controller = cluster.controller()
    cluster.create(member("w-0", "llm", 2))
    cluster.create(member("w-1", "llm", 2))
    controller.reconcile_once()
    big = clique_of(nodes, "rack1-tray0")
    assert gang_apiserver.pod("ml/w-0")["spec"]["nodeSelector"]["kgwe.io/nvlink-clique"] == big
    cluster.schedule("ml/w-0", "rack1-tray0")
    cluster.schedule("ml/w-1", "rack1-tray1")
    controller.reconcile_once()
    assert gang_apiserver.ledger_records() == []  # bound fully: the record is released
    # The small clique frees up (best fit for one more pod), then a worker fails and is replaced.
    cluster.delete("ml/busy")
    cluster.delete("ml/w-1")
    cluster.create(member("w-1b", "llm", 2))
    controller.reconcile_once()
    pinned = gang_apiserver.pod("ml/w-1b")["spec"]
    assert "schedulingGates" not in pinned
    assert pinned["nodeSelector"]["kgwe.io/nvlink-clique"] == big  # with its gang, not in the best fit


def test_the_pass_a_last_member_wakes_plans_with_that_member(
    gang_apiserver: GangApiServer, api: k8s_client.ApiClient  # noqa: F811
) -> None:
    """The pass reads the store as it is, not the snapshot built before the change that woke it: that one is
    replaced in the background later, and nothing wakes the controller again before its next tick (5 s)."""
    with_nodes(gang_apiserver, cliques(4))
    cluster = replica(gang_apiserver, api)
    controller = cluster.controller()
    cluster.create(member("w-0", "llm", 2))
    assert controller.reconcile_once() == []
    last = admit(cluster.runtime, member("w-1", "llm", 2))
    assert last.allowed, last.message
    cluster.store.min_rebuild_interval = 3600  # no snapshot is rebuilt behind the pass's back
    gang_apiserver.put("Pod", last.pod)
    gang_apiserver.wait_for(lambda: "ml/w-1" in {object_key(p) for p in cluster.store.objects("Pod")})
    assert [a.kind for a in controller.reconcile_once()] == ["release"]
    assert cluster.gated() == set()
