"""Gang incarnations: a gang restarted under the same name (a JobSet or PyTorchJob after a failure, a Job
re-created, pods applied again) while pods of the previous run still terminate or are kept finished. Old pods
never complete the new gang, a release covers only the pods it was decided for, a gang that lost a member
after its release waits again, finished members hold no room, and gangs of the same name in two namespaces
are two gangs. Each runs the controller as `kgwe serve` does, over the fake API server, with every pod
admitted through the webhooks as kube-apiserver posts it."""

from __future__ import annotations

import pytest
from gang_support import (
    Cluster,
    GangApiServer,
    api,  # noqa: F401  (fixture)
    bind,
    clique_of,
    cliques,
    gang_apiserver,  # noqa: F401  (fixture)
    member,
    replica,
    with_nodes,
)
from kubernetes import client as k8s_client

from webhook.gangs.controller import GangController, kube_pod_writer
from webhook.placement.rooms import RoomId


def started(cluster: Cluster, controller: GangController, gang: str, size: int, nodes: list[str]) -> None:
    """Members `<gang>-0..` of a gang of `size` are admitted, released, and the first len(nodes) of them bound."""
    for index in range(size):
        cluster.create(member(f"{gang}-{index}", gang, size))
    controller.reconcile_once()
    assert not cluster.gated(), "the whole gang exists and fits: it is released"
    for index, node in enumerate(nodes):
        cluster.schedule(f"ml/{gang}-{index}", node)


def record_of(server: GangApiServer, gang: str, namespace: str = "ml") -> dict[str, object]:
    (found,) = [r for r in server.ledger_records() if r["gang"] == gang and r["namespace"] == namespace]
    return found


def test_terminating_pods_of_the_previous_run_never_complete_the_restarted_gang(
    gang_apiserver: GangApiServer, api: k8s_client.ApiClient  # noqa: F811
) -> None:
    nodes = cliques(4)
    with_nodes(gang_apiserver, nodes)
    cluster = replica(gang_apiserver, api)
    controller = cluster.controller()
    started(cluster, controller, "llm", 2, ["rack0-tray0", "rack0-tray1"])
    controller.reconcile_once()
    assert gang_apiserver.ledger_records() == []  # bound fully: the record is released
    # The job restarts: its old pods stop within their grace period, still bound, while the new ones come.
    cluster.terminate("ml/llm-0")
    cluster.terminate("ml/llm-1")
    cluster.create(member("llm-new-0", "llm", 2))
    controller.reconcile_once()
    assert cluster.gated() == {"ml/llm-new-0"}  # one of two: a partial gang never holds a GPU
    assert record_of(gang_apiserver, "llm")["reason"] == "1 of 2 members exist"

    cluster.create(member("llm-new-1", "llm", 2))
    controller.reconcile_once()
    assert cluster.gated() == set()
    clique = clique_of(nodes, "rack0-tray2")
    for key in ("ml/llm-new-0", "ml/llm-new-1"):
        assert gang_apiserver.pod(key)["spec"]["nodeSelector"]["kgwe.io/nvlink-clique"] == clique


@pytest.mark.parametrize("pass_between", [True, False], ids=["record-dropped", "record-still-released"])
def test_finished_pods_a_job_keeps_never_complete_the_restarted_gang(
    gang_apiserver: GangApiServer, api: k8s_client.ApiClient, pass_between: bool  # noqa: F811
) -> None:
    with_nodes(gang_apiserver, cliques(4))
    cluster = replica(gang_apiserver, api)
    controller = cluster.controller()
    started(cluster, controller, "llm", 2, ["rack0-tray0", "rack0-tray1"])
    cluster.finish("ml/llm-0", "Failed")
    cluster.finish("ml/llm-1", "Failed")
    if pass_between:
        controller.reconcile_once()  # else the retry comes before the controller saw the old run end
    gang_apiserver.clock_offset = 5
    cluster.create(member("llm-retry-0", "llm", 2))
    controller.reconcile_once()
    assert cluster.gated() == {"ml/llm-retry-0"}
    assert record_of(gang_apiserver, "llm")["reason"] == "1 of 2 members exist"


def test_a_restart_while_the_old_gang_is_still_scheduled_waits_for_the_whole_new_gang(
    gang_apiserver: GangApiServer, api: k8s_client.ApiClient  # noqa: F811
) -> None:
    with_nodes(gang_apiserver, cliques(4))
    cluster = replica(gang_apiserver, api)
    controller = cluster.controller()
    started(cluster, controller, "llm", 2, ["rack0-tray0"])  # released; llm-1 not bound yet
    assert "releasedAt" in record_of(gang_apiserver, "llm")
    cluster.terminate("ml/llm-0")
    cluster.delete("ml/llm-1")  # never bound: the API server removes it at once
    gang_apiserver.clock_offset = 5
    cluster.create(member("llm-new-0", "llm", 2))
    controller.reconcile_once()
    assert cluster.gated() == {"ml/llm-new-0"}  # the old release covers none of the new pods
    record = record_of(gang_apiserver, "llm")
    assert "releasedAt" not in record and record["reason"] == "1 of 2 members exist"

    cluster.create(member("llm-new-1", "llm", 2))
    controller.reconcile_once()
    assert cluster.gated() == set()


def test_a_complete_new_run_waits_until_the_old_pods_leave_its_room(
    gang_apiserver: GangApiServer, api: k8s_client.ApiClient  # noqa: F811
) -> None:
    nodes = cliques(2)  # one 8-GPU clique: the old run's terminating pod holds half of it
    with_nodes(gang_apiserver, nodes)
    cluster = replica(gang_apiserver, api)
    controller = cluster.controller()
    started(cluster, controller, "llm", 2, ["rack0-tray0"])
    cluster.terminate("ml/llm-0")
    cluster.delete("ml/llm-1")
    gang_apiserver.clock_offset = 5
    cluster.create(member("llm-new-0", "llm", 2))
    cluster.create(member("llm-new-1", "llm", 2))
    controller.reconcile_once()
    # Complete, but its room has one free tray until the old pod is gone: released now, it would wait Pending.
    assert cluster.gated() == {"ml/llm-new-0", "ml/llm-new-1"}
    assert "4 GPUs short" in str(record_of(gang_apiserver, "llm")["reason"])

    cluster.delete("ml/llm-0")  # the kubelet confirmed: the GPUs are free
    controller.reconcile_once()
    assert cluster.gated() == set()
    clique = clique_of(nodes, "rack0-tray0")
    assert gang_apiserver.pod("ml/llm-new-1")["spec"]["nodeSelector"]["kgwe.io/nvlink-clique"] == clique


def test_a_gang_re_created_with_a_bigger_size_waits_for_all_of_its_members(
    gang_apiserver: GangApiServer, api: k8s_client.ApiClient  # noqa: F811
) -> None:
    with_nodes(gang_apiserver, cliques(4))
    cluster = replica(gang_apiserver, api)
    controller = cluster.controller()
    cluster.create(member("llm-0", "llm", 2))
    controller.reconcile_once()
    cluster.delete("ml/llm-0")  # re-applied with 3 workers before the record's grace period ran out
    for index in range(2):
        cluster.create(member(f"llm-big-{index}", "llm", 3))
    controller.reconcile_once()
    assert cluster.gated() == {"ml/llm-big-0", "ml/llm-big-1"}
    record = record_of(gang_apiserver, "llm")
    assert record["size"] == 3 and record["reason"] == "2 of 3 members exist"

    cluster.create(member("llm-big-2", "llm", 3))
    controller.reconcile_once()
    assert cluster.gated() == set()


def test_members_disagreeing_on_the_size_wait_for_the_largest(
    gang_apiserver: GangApiServer, api: k8s_client.ApiClient  # noqa: F811
) -> None:
    with_nodes(gang_apiserver, cliques(4))
    cluster = replica(gang_apiserver, api)
    controller = cluster.controller()
    cluster.create(member("w-0", "llm", 2))  # the record is written from this member's size
    cluster.create(member("w-1", "llm", 3))
    controller.reconcile_once()
    assert cluster.gated() == {"ml/w-0", "ml/w-1"}
    assert record_of(gang_apiserver, "llm")["reason"] == "2 of 3 members exist"


def test_a_member_deleted_after_the_release_was_committed_sends_the_gang_back_to_waiting(
    gang_apiserver: GangApiServer, api: k8s_client.ApiClient  # noqa: F811
) -> None:
    nodes = cliques(2, 4)
    with_nodes(gang_apiserver, nodes)
    cluster = replica(gang_apiserver, api)
    cluster.create(member("w-0", "llm", 2))
    cluster.create(member("w-1", "llm", 2))
    cluster.controller(writer=False).reconcile_once()  # the leader commits the release, then stops
    assert "releasedAt" in record_of(gang_apiserver, "llm")
    cluster.delete("ml/w-1")
    successor = replica(gang_apiserver, api).controller()
    successor.reconcile_once()
    assert cluster.gated() == {"ml/w-0"}  # finishing the release now would start half a gang
    record = record_of(gang_apiserver, "llm")
    assert "releasedAt" not in record and record["reason"] == "1 of 2 members exist"

    cluster.create(member("w-1b", "llm", 2))
    successor.reconcile_once()
    assert cluster.gated() == set()
    selectors = {gang_apiserver.pod(k)["spec"]["nodeSelector"]["kgwe.io/nvlink-clique"] for k in ("ml/w-0", "ml/w-1b")}
    assert selectors == {clique_of(nodes, "rack0-tray0")}


def test_a_member_that_finished_holds_no_room_for_another_gang(
    gang_apiserver: GangApiServer, api: k8s_client.ApiClient  # noqa: F811
) -> None:
    with_nodes(gang_apiserver, cliques(3))  # 12 GPUs in one clique
    cluster = replica(gang_apiserver, api)
    controller = cluster.controller()
    started(cluster, controller, "a", 2, ["rack0-tray0"])
    cluster.finish("ml/a-0")  # a short rank ended before its peer was bound
    controller.reconcile_once()
    cluster.schedule("ml/a-1", "rack0-tray1")
    controller.reconcile_once()
    # Every member of `a` that remains is bound: nothing of it is left to place, so it promises nothing.
    assert [r["gang"] for r in gang_apiserver.ledger_records()] == []
    cluster.create(member("b-0", "b", 2))
    cluster.create(member("b-1", "b", 2))
    controller.reconcile_once()
    assert cluster.gated() == set()  # trays 0 and 2 are free


def test_a_released_gang_whose_members_all_finished_loses_its_record(
    gang_apiserver: GangApiServer, api: k8s_client.ApiClient  # noqa: F811
) -> None:
    with_nodes(gang_apiserver, cliques(4))
    cluster = replica(gang_apiserver, api)
    controller = cluster.controller()
    started(cluster, controller, "llm", 2, ["rack0-tray0"])
    cluster.finish("ml/llm-0")
    cluster.finish("ml/llm-1", "Failed")
    controller.reconcile_once()
    assert gang_apiserver.ledger_records() == []


def test_gangs_of_one_name_in_two_namespaces_are_two_gangs(
    gang_apiserver: GangApiServer, api: k8s_client.ApiClient  # noqa: F811
) -> None:
    with_nodes(gang_apiserver, cliques(4))
    cluster = replica(gang_apiserver, api)
    controller = cluster.controller()
    cluster.create(member("w-0", "llm", 2))
    cluster.create(member("w-1", "llm", 2, namespace="other-team"))
    controller.reconcile_once()
    assert cluster.gated() == {"ml/w-0", "other-team/w-1"}  # neither completes the other
    assert record_of(gang_apiserver, "llm")["reason"] == "1 of 2 members exist"
    assert record_of(gang_apiserver, "llm", "other-team")["reason"] == "1 of 2 members exist"


def test_a_replacement_joins_the_room_its_half_released_gang_is_pinned_to(
    gang_apiserver: GangApiServer, api: k8s_client.ApiClient  # noqa: F811
) -> None:
    nodes = cliques(2, 4)  # an 8-GPU clique (best fit for 2 x 4 GPUs) and a 16-GPU one
    with_nodes(gang_apiserver, nodes)
    cluster = replica(gang_apiserver, api)
    cluster.create(member("w-0", "llm", 2))
    cluster.create(member("w-1", "llm", 2))
    cluster.controller(writer=False).reconcile_once()
    room = RoomId.from_json(record_of(gang_apiserver, "llm")["room"])
    assert room is not None and room.value == clique_of(nodes, "rack0-tray0")
    # The old leader pinned and ungated w-0, then stopped; w-1 is deleted, and another pod takes a tray of the room.
    writer = kube_pod_writer(api)
    writer.ungate(gang_apiserver.pod("ml/w-0"), writer.pin(gang_apiserver.pod("ml/w-0"), room))
    cluster.delete("ml/w-1")
    gang_apiserver.put("Pod", bind(member("squatter", "none", None, accelerator=None), "rack0-tray1"))
    gang_apiserver.clock_offset = 5
    cluster.create(member("w-1b", "llm", 2))
    controller = cluster.controller()
    controller.reconcile_once()
    # The big clique has space, but w-0 can only run in the small one: the gang waits for it, never split.
    assert cluster.gated() == {"ml/w-1b"}
    assert record_of(gang_apiserver, "llm")["reason"] == f"{room.value} is 4 GPUs short for 2 pods x 4 GPUs"

    cluster.delete("ml/squatter")
    controller.reconcile_once()
    assert cluster.gated() == set()
    assert gang_apiserver.pod("ml/w-1b")["spec"]["nodeSelector"]["kgwe.io/nvlink-clique"] == room.value
