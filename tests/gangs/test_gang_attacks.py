"""Red-team cases of all-or-nothing gangs: a pod creator or an unlucky operator trying to make a gang hold GPUs
while incomplete, to take room promised to another tenant's gang, or to wedge gangs. Each runs the controller as
`kgwe serve` does, over the fake API server, with every pod admitted through the webhooks as kube-apiserver
posts it."""

from __future__ import annotations

import pytest
from gang_support import (
    H100,
    GangApiServer,
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

import webhook.gangs.ledger
import webhook.gangs.planning
from webhook.cluster.kube_json import KubeJson
from webhook.gangs.controller import GangController, kube_pod_writer
from webhook.gangs.ledger import KubeGangStore, Versioned

CLIQUE_LABEL = "kgwe.io/nvlink-clique"


def record_of(server: GangApiServer, gang: str, namespace: str = "ml") -> dict[str, object]:
    (found,) = [r for r in server.ledger_records() if r["gang"] == gang and r["namespace"] == namespace]
    return found


def pinned(server: GangApiServer, key: str) -> str | None:
    selector = server.pod(key)["spec"].get("nodeSelector") or {}
    return selector.get(CLIQUE_LABEL)


def test_a_member_whose_own_selector_names_another_room_moves_the_whole_gang_there(
    gang_apiserver: GangApiServer, api: k8s_client.ApiClient  # noqa: F811
) -> None:
    # Attack: the first member admitted is unconstrained (the best fit is the small clique), a later one selects
    # the big clique itself. Pinned to the small clique, that member could never run (and Kubernetes refuses to
    # change a gated pod's nodeSelector value): the others would start without it, a partial gang holding GPUs.
    nodes = cliques(2, 4)
    with_nodes(gang_apiserver, nodes)
    cluster = replica(gang_apiserver, api)
    controller = cluster.controller()
    big = clique_of(nodes, "rack1-tray0")
    cluster.create(member("w-0", "llm", 2))
    controller.reconcile_once()
    assert record_of(gang_apiserver, "llm")["room"]["value"] == clique_of(nodes, "rack0-tray0")  # type: ignore[index]
    picky = member("w-1", "llm", 2)
    picky["spec"]["nodeSelector"] = {CLIQUE_LABEL: big}
    cluster.create(picky)
    controller.reconcile_once()
    assert cluster.gated() == set()
    assert {pinned(gang_apiserver, "ml/w-0"), pinned(gang_apiserver, "ml/w-1")} == {big}


def test_members_no_single_room_satisfies_wait_gated_and_none_starts(
    gang_apiserver: GangApiServer, api: k8s_client.ApiClient  # noqa: F811
) -> None:
    nodes = cliques(2, 4)
    with_nodes(gang_apiserver, nodes)
    cluster = replica(gang_apiserver, api)
    for index, tray in enumerate(("rack0-tray0", "rack1-tray0")):
        pod = member(f"w-{index}", "llm", 2)
        pod["spec"]["nodeSelector"] = {CLIQUE_LABEL: clique_of(nodes, tray)}
        cluster.create(pod)
    cluster.controller().reconcile_once()
    assert cluster.gated() == {"ml/w-0", "ml/w-1"}  # two rooms asked: all or nothing means nothing
    assert record_of(gang_apiserver, "llm")["reason"] == "no NVLink room of its types could hold it"
    assert pinned(gang_apiserver, "ml/w-0") == clique_of(nodes, "rack0-tray0")  # its own choice, untouched


def test_a_pin_that_fails_ungates_no_member_until_every_member_is_pinned(
    gang_apiserver: GangApiServer, api: k8s_client.ApiClient  # noqa: F811
) -> None:
    # The unlucky SRE: the API server fails one member's pin (a 500, an etcd timeout) in the middle of a release.
    with_nodes(gang_apiserver, cliques(4))
    cluster = replica(gang_apiserver, api)
    controller = cluster.controller()
    cluster.create(member("w-0", "llm", 2))
    cluster.create(member("w-1", "llm", 2))
    gang_apiserver.fail_next("/api/v1/namespaces/ml/pods/w-0", 500)
    controller.reconcile_once()
    assert cluster.gated() == {"ml/w-0", "ml/w-1"}  # w-1 alone would hold GPUs its gang cannot use
    cluster.sync()
    controller.reconcile_once()  # the release is finished on the next pass
    assert cluster.gated() == set()


def test_an_expired_gang_that_comes_back_takes_no_room_promised_to_a_gang_since(
    gang_apiserver: GangApiServer, api: k8s_client.ApiClient  # noqa: F811
) -> None:
    # Attack: one member of gang `a` waits past the timeout (its promise lapses), another tenant's gang `b` is then
    # promised the room; `a`'s last member arrives. Its record's age is from before `b`, so counted as older it
    # would skip `b`'s promise and take the room: two gangs promised one room, and the queue jumped at will.
    nodes = cliques(2)  # one 8-GPU clique: room for one gang of 2 x 4 GPUs
    with_nodes(gang_apiserver, nodes)
    cluster = replica(gang_apiserver, api)
    controller = cluster.controller()
    cluster.create(member("a-0", "a", 2))
    controller.reconcile_once()
    cluster.clock.offset = 700  # past gangs.timeoutSeconds (600)
    controller.reconcile_once()
    assert record_of(gang_apiserver, "a").get("expired") is True
    cluster.clock.offset = 0  # the controller's clock back, so that `b`'s promise stays fresh
    cluster.create(member("b-0", "b", 2, namespace="team-b"))
    controller.reconcile_once()
    assert record_of(gang_apiserver, "b", "team-b")["room"]["value"] == clique_of(nodes, "rack0-tray0")  # type: ignore[index]
    cluster.create(member("a-1", "a", 2))
    controller.reconcile_once()
    assert cluster.gated() == {"ml/a-0", "ml/a-1", "team-b/b-0"}  # `a` waits behind `b`'s promise
    assert "8 GPUs short" in str(record_of(gang_apiserver, "a")["reason"])

    cluster.create(member("b-1", "b", 2, namespace="team-b"))
    controller.reconcile_once()
    assert cluster.gated() == {"ml/a-0", "ml/a-1"}


def test_a_full_ledger_of_lapsed_one_pod_gangs_never_wedges_a_complete_gang(
    gang_apiserver: GangApiServer, api: k8s_client.ApiClient, monkeypatch: pytest.MonkeyPatch  # noqa: F811
) -> None:
    # Attack: a tenant fills the ledger with gangs that never complete (one gated pod each, holding no GPU).
    # Another tenant's complete gang then has no record: it must still start once those promises lapsed.
    monkeypatch.setattr(webhook.gangs.ledger, "MAX_RECORDS", 2)  # the bound, made small enough to reach here
    monkeypatch.setattr(webhook.gangs.planning, "MAX_RECORDS", 2)
    with_nodes(gang_apiserver, cliques(4))
    cluster = replica(gang_apiserver, api)
    controller = cluster.controller()
    for index in range(2):
        cluster.create(member(f"squat-{index}", f"squat-{index}", 2, namespace="evil"))
    cluster.create(member("v-0", "v", 2))
    cluster.create(member("v-1", "v", 2))
    controller.reconcile_once()
    assert cluster.gated() == {"evil/squat-0", "evil/squat-1", "ml/v-0", "ml/v-1"}  # the promises still hold
    cluster.clock.offset = 700  # past gangs.timeoutSeconds: the squatters' promises lapse
    controller.reconcile_once()
    assert cluster.gated() == {"evil/squat-0", "evil/squat-1"}
    assert len(gang_apiserver.ledger_records()) <= 2


class _WrittenInBetween(KubeGangStore):
    """The real ledger store, where another writer (a replica that also believes it leads, during a Lease
    handover) writes the ledger right after each of the controller's first `races` reads."""

    def __init__(self, client: k8s_client.ApiClient, races: int) -> None:
        super().__init__(KubeJson(client))
        self.other = KubeGangStore(KubeJson(client))
        self.races = races

    def read(self, *, timeout: float | None = None) -> Versioned:
        current = super().read(timeout=timeout)
        if self.races > 0:
            self.races -= 1
            theirs = self.other.read()
            assert self.other.write(theirs.records, theirs.version)
        return current


def test_a_controller_pass_that_loses_the_ledger_race_plans_again_at_once(
    gang_apiserver: GangApiServer, api: k8s_client.ApiClient  # noqa: F811
) -> None:
    # Another writer changes the ledger between the controller's read and its write: the pass must still release
    # a complete gang (re-read, re-plan), not give the pass up.
    with_nodes(gang_apiserver, cliques(4))
    cluster = replica(gang_apiserver, api)
    cluster.create(member("w-0", "llm", 2))
    cluster.create(member("w-1", "llm", 2))
    controller = GangController(cluster.store, _WrittenInBetween(api, races=2), cluster.config, kube_pod_writer(api),
                                clock=cluster.clock)
    assert [a.kind for a in controller.reconcile_once()] == ["release"]
    assert cluster.gated() == set()


def test_a_member_of_another_gpu_type_keeps_the_whole_gang_gated(
    gang_apiserver: GangApiServer, api: k8s_client.ApiClient  # noqa: F811
) -> None:
    # A pod of the namespace claims the gang's name but asks for H100s: no room of the gang holds it, so no member
    # starts (pinned to the gang's GB200 clique, it could never run, and the GB200 members would run without it).
    with_nodes(gang_apiserver, [*cliques(4), h100_node("dgx-0")])
    cluster = replica(gang_apiserver, api)
    cluster.create(member("w-0", "llm", 2))
    cluster.create(member("w-1", "llm", 2, accelerator=H100))
    cluster.controller().reconcile_once()
    assert cluster.gated() == {"ml/w-0", "ml/w-1"}


def test_a_move_to_another_room_counts_once_however_many_times_the_pass_planned_it(
    gang_apiserver: GangApiServer, api: k8s_client.ApiClient  # noqa: F811
) -> None:
    nodes = cliques(2, 4)
    with_nodes(gang_apiserver, nodes)
    cluster = replica(gang_apiserver, api)
    cluster.create(member("w-0", "llm", 2))
    cluster.controller().reconcile_once()  # one member of two: the gang is promised the small clique
    cluster.create(member("w-1", "llm", 2))
    # Another workload takes a tray of the small clique the gang was promised: it moves to the big one.
    gang_apiserver.put("Pod", bind(member("squatter", "none", None, accelerator=None), "rack0-tray1"))
    cluster.sync()
    before = REGISTRY.get_sample_value("kgwe_gang_replans_total") or 0.0
    controller = GangController(cluster.store, _WrittenInBetween(api, races=2), cluster.config, kube_pod_writer(api),
                                clock=cluster.clock)
    controller.reconcile_once()
    assert cluster.gated() == set()
    assert pinned(gang_apiserver, "ml/w-0") == clique_of(nodes, "rack1-tray0")
    assert (REGISTRY.get_sample_value("kgwe_gang_replans_total") or 0.0) - before == 1
