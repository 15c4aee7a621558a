"""Gang members at admission: the gate, the label and the clique requirement, dry runs, bounded gang sizes, the
v1 behaviour without a size, the Kueue variant, and the read-only warning when no room has space now. The
room is chosen where the members exist, by the controller's plan (best fit, promises, node domains): each
test stores the admitted members in the model and plans from it, as the leader does from the API."""

from __future__ import annotations

import time
from typing import Any

from gang_support import (
    H100,
    admit,
    bind,
    clique_of,
    cliques,
    h100_node,
    make_runtime,
    make_store,
    member,
    review,
)

from webhook.admission.request import decode_review
from webhook.cluster.model import ClusterStore
from webhook.gangs.ledger import Records
from webhook.gangs.planning import plan_gangs
from webhook.wing_config import Gangs


class Leader:
    """The controller's plan over a model, pass after pass, its records kept in memory (no API call)."""

    def __init__(self, store: ClusterStore) -> None:
        self.store = store
        self.records: Records = {}

    def sees(self, *pods: dict[str, Any]) -> Records:
        """The admitted `pods` exist now; one planning pass over them."""
        for pod in pods:
            self.store.upsert(pod)
        self.records, _actions = plan_gangs(self.store.snapshot(force=True), self.records, Gangs(), time.time())
        return self.records


def test_member_is_labelled_and_gated_and_the_gang_gets_the_best_fitting_clique() -> None:
    nodes = cliques(4, 2, 8)  # 16, 8 and 32 GPUs
    store = make_store(*nodes)
    runtime = make_runtime(store)
    result = admit(runtime, member("w-0", "llm", 2))  # 2 pods x 4 GPUs: the 8-GPU clique fits exactly
    assert result.allowed, result.message
    pod = result.pod
    assert pod["metadata"]["labels"]["kgwe.io/gang"] == "llm"
    assert pod["spec"]["schedulingGates"] == [{"name": "kgwe.io/gang"}]
    terms = pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert {"key": "kgwe.io/nvlink-clique", "operator": "Exists"} in terms["nodeSelectorTerms"][0]["matchExpressions"]
    assert "podAffinity" not in pod["spec"]["affinity"]  # the v1 co-location term is not written for sized gangs
    assert result.warnings == []  # a room has space now
    (record,) = Leader(store).sees(pod).values()
    assert record.room is not None and record.room.value == clique_of(nodes, "rack1-tray0")
    assert (record.size, record.gpus_per_pod) == (2, 4)


def test_later_members_are_mutated_alike_and_the_gang_has_one_record() -> None:
    store = make_store(*cliques(4))
    runtime = make_runtime(store)
    first = admit(runtime, member("w-0", "llm", 3))
    second = admit(runtime, member("w-1", "llm", 3))
    assert first.allowed and second.allowed
    assert first.pod["spec"] == second.pod["spec"]
    assert list(Leader(store).sees(first.pod, second.pod)) == ["ml/llm"]


def test_promised_capacity_counts_as_used_for_the_next_gang() -> None:
    nodes = cliques(2, 2)  # two 8-GPU cliques
    store = make_store(*nodes)
    runtime = make_runtime(store)
    leader = Leader(store)
    leader.sees(admit(runtime, member("a-0", "a", 2)).pod)  # one member of two: the gang is promised a room
    records = leader.sees(admit(runtime, member("b-0", "b", 2)).pod)
    assert records["ml/a"].room is not None and records["ml/b"].room is not None
    assert records["ml/a"].room != records["ml/b"].room  # never the same room
    # A third gang finds no room now: it waits gated, recorded without a room.
    third = admit(runtime, member("c-0", "c", 2))
    assert third.allowed and third.pod["spec"]["schedulingGates"] == [{"name": "kgwe.io/gang"}]
    assert leader.sees(third.pod)["ml/c"].room is None


def test_new_gangs_of_one_pass_are_promised_rooms_in_the_order_their_members_were_created() -> None:
    nodes = cliques(2)  # one 8-GPU clique: room for one gang of 2 x 4 GPUs
    store = make_store(*nodes)
    runtime = make_runtime(store)
    late = admit(runtime, member("a-0", "a", 2)).pod
    early = admit(runtime, member("z-0", "z", 2)).pod
    late["metadata"]["creationTimestamp"] = "2025-06-01T10:00:05Z"
    early["metadata"]["creationTimestamp"] = "2025-06-01T10:00:01Z"
    records = Leader(store).sees(late, early)
    assert records["ml/z"].room is not None and records["ml/z"].room.value == clique_of(nodes, "rack0-tray0")
    assert records["ml/a"].room is None  # it came second: no room left to promise


def test_bound_pods_count_against_a_clique() -> None:
    nodes = cliques(2, 4)
    busy = bind(member("other", "x", None, accelerator=None), "rack0-tray0")  # 4 GPUs used in the small clique
    store = make_store(*nodes, busy)
    runtime = make_runtime(store)
    result = admit(runtime, member("w-0", "llm", 2))
    assert result.allowed
    room = Leader(store).sees(result.pod)["ml/llm"].room
    assert room is not None and room.value == clique_of(nodes, "rack1-tray0")


def test_a_gang_no_clique_could_ever_hold_is_refused_naming_the_largest() -> None:
    nodes = cliques(2, 18)  # 8 and 72 GPUs
    runtime = make_runtime(make_store(*nodes))
    result = admit(runtime, member("w-0", "huge", 19))  # 76 GPUs
    assert not result.allowed
    assert "19 pods x 4 GPUs = 76 GPUs" in result.message
    assert f"the largest NVLink clique, {clique_of(nodes, 'rack1-tray0')}, has 72 GPUs" in result.message


def test_dry_run_is_answered_the_same() -> None:
    runtime = make_runtime(make_store(*cliques(2)))
    result = admit(runtime, member("w-0", "llm", 2), dry_run=True)
    assert result.allowed and result.pod["spec"]["schedulingGates"] == [{"name": "kgwe.io/gang"}]
    assert result.pod == admit(runtime, member("w-0", "llm", 2)).pod


def test_a_gang_that_fits_one_nodes_nvlink_domain_may_use_a_single_node() -> None:
    store = make_store(h100_node("dgx-1"), h100_node("dgx-2", gpus=4))
    runtime = make_runtime(store)
    result = admit(runtime, member("w-0", "small", 2, gpus=2, accelerator=H100))
    assert result.allowed, result.message
    room = Leader(store).sees(result.pod)["ml/small"].room
    assert room is not None and (room.kind, room.key, room.value) == ("node", "kubernetes.io/hostname", "dgx-2")
    terms = result.pod["spec"].get("affinity", {}).get("nodeAffinity", {})
    assert "kgwe.io/nvlink-clique" not in str(terms)  # node rooms have no clique label
    refused = admit(runtime, member("w-0", "big", 3, gpus=4, accelerator=H100))
    assert not refused.allowed and "the largest single-node NVLink domain (dgx-1) has 8 GPUs" in refused.message


def test_gang_size_is_validated_and_bounded() -> None:
    runtime = make_runtime(make_store(*cliques(2)))
    for bad in ("0", "-3", "two", "1e3", "1025", "99999999999", " ", "٣"):
        result = admit(runtime, member("w-0", "llm", bad))
        assert not result.allowed, bad
        assert "kgwe.io/gang-size" in result.message and "from 1 to 1024" in result.message
    lonely = member("w-0", "llm", 2)
    del lonely["metadata"]["annotations"]["kgwe.io/gang"]
    result = admit(runtime, lonely)
    assert not result.allowed and "kgwe.io/gang-size needs kgwe.io/gang" in result.message


def test_without_gang_size_the_v1_behaviour_stays() -> None:
    store = make_store(*cliques(2))
    runtime = make_runtime(store)
    result = admit(runtime, member("w-0", "llm", None))
    assert result.allowed
    spec = result.pod["spec"]
    assert "schedulingGates" not in spec
    assert spec["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] == [
        {"labelSelector": {"matchLabels": {"kgwe.io/gang": "llm"}}, "topologyKey": "kgwe.io/nvlink-clique"}
    ]
    assert Leader(store).sees(result.pod) == {}


def test_kueue_managed_gangs_get_the_topology_request_instead_of_a_gate() -> None:
    store = make_store(*cliques(2))
    runtime = make_runtime(store)
    pod = member("w-0", "llm", 2, labels={"kueue.x-k8s.io/queue-name": "training"})
    result = admit(runtime, pod)
    assert result.allowed
    assert "schedulingGates" not in result.pod["spec"]
    assert result.pod["metadata"]["annotations"]["kueue.x-k8s.io/podset-required-topology"] == "kgwe.io/nvlink-clique"
    assert result.pod["metadata"]["labels"]["kgwe.io/gang"] == "llm"
    assert Leader(store).sees(result.pod) == {}  # Kueue places the gang; KGWE promises nothing


def test_a_second_pass_changes_nothing() -> None:
    runtime = make_runtime(make_store(*cliques(2)))
    once = admit(runtime, member("w-0", "llm", 2)).pod
    assert runtime.admission.mutate(decode_review(review(once))).patch == []


def test_the_gang_is_sized_by_its_largest_member() -> None:
    store = make_store(*cliques(4))
    runtime = make_runtime(store)
    leader = member("leader", "lws", 3, gpus=0)
    leader["spec"]["containers"][0]["resources"] = {}
    first = admit(runtime, leader)
    assert first.allowed
    planner = Leader(store)
    assert planner.sees(first.pod)["ml/lws"].gpus_per_pod == 0
    second = admit(runtime, member("worker-0", "lws", 3, gpus=4))
    assert second.allowed
    assert planner.sees(second.pod)["ml/lws"].gpus_per_pod == 4


def test_a_member_is_warned_when_no_room_has_space_now_from_the_model_alone() -> None:
    nodes = cliques(2)  # one 8-GPU clique, both trays busy
    busy = [bind(member(f"other-{t}", "x", None, accelerator=None), f"rack0-tray{t}") for t in range(2)]
    runtime = make_runtime(make_store(*nodes, *busy))
    result = admit(runtime, member("w-0", "llm", 2))
    assert result.allowed
    assert result.pod["spec"]["schedulingGates"] == [{"name": "kgwe.io/gang"}]
    assert any("no NVLink room has space for the whole gang now" in w and "wait gated" in w for w in result.warnings)



def test_the_warnings_kept_for_a_snapshot_are_each_members_own() -> None:
    # In one snapshot, members that differ in one thing each the warnings read (the namespace, the gang, its size,
    # the GPUs, the type, the node constraints), sent again and again in turns: each gets what a fresh runtime
    # says of it. Then other snapshots: a member of `ml/llm` bound on one tray of the only clique (the gang of
    # that name in another namespace has none), both trays busy, two trays of four busy.
    fits = member("w-0", "llm", 2)
    too_big = member("w-1", "llm", 5)  # 20 GPUs: no clique holds it
    nowhere = member("w-2", "llm", 2)
    nowhere["spec"]["nodeSelector"] = {"rack": "nowhere"}
    one_each = member("w-3", "llm", 5, gpus=1)
    elsewhere = member("w-0", "llm", 2, namespace="other")
    elsewhere_small = member("w-5", "llm", 2, gpus=2, namespace="other")
    other_type = member("w-4", "solo", 2, accelerator=H100)
    bigger = member("w-6", "llm", 3)
    pods = [fits, too_big, nowhere, one_each, elsewhere, elsewhere_small, other_type, bigger]

    def warnings(runtime: Any, pod: dict[str, Any]) -> list[str]:
        return list(runtime.admission.mutate(decode_review(review(pod))).warnings)

    bound = bind(member("w-9", "llm", 2, labels={"kgwe.io/gang": "llm"}), "rack0-tray0")
    busy = [bind(member(f"other-{t}", "x", None, accelerator=None), f"rack0-tray{t}") for t in range(2)]
    for objects in (cliques(2, 4), [*cliques(2), bound], [*cliques(2), *busy], [*cliques(4), *busy]):
        warm = make_runtime(make_store(*objects))
        expected = [warnings(make_runtime(make_store(*objects)), pod) for pod in pods]
        assert any(expected) and not all(expected)  # both kinds of answer, to tell them apart
        for _ in range(3):
            assert [warnings(warm, pod) for pod in pods] == expected
