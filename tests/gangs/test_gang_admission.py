"""Gang members at admission: the gate, the clique choice (best fit, promises, node domains), dry runs,
bounded gang sizes, the v1 behaviour without a size, and the Kueue variant."""

from __future__ import annotations

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
from webhook.gangs.ledger import GangStoreUnavailable, MemoryGangStore, Versioned


def test_member_is_labelled_and_gated_and_the_gang_gets_the_best_fitting_clique() -> None:
    nodes = cliques(4, 2, 8)  # 16, 8 and 32 GPUs
    gangs = MemoryGangStore()
    runtime = make_runtime(make_store(*nodes), gangs)
    result = admit(runtime, member("w-0", "llm", 2))  # 2 pods x 4 GPUs: the 8-GPU clique fits exactly
    assert result.allowed, result.message
    pod = result.pod
    assert pod["metadata"]["labels"]["kgwe.io/gang"] == "llm"
    assert pod["spec"]["schedulingGates"] == [{"name": "kgwe.io/gang"}]
    terms = pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert {"key": "kgwe.io/nvlink-clique", "operator": "Exists"} in terms["nodeSelectorTerms"][0]["matchExpressions"]
    assert "podAffinity" not in pod["spec"]["affinity"]  # the v1 co-location term is not written for sized gangs
    (record,) = gangs.records.values()
    assert record.room is not None and record.room.value == clique_of(nodes, "rack1-tray0")
    assert (record.size, record.gpus_per_pod) == (2, 4)


def test_later_members_join_the_record_and_are_mutated_alike() -> None:
    gangs = MemoryGangStore()
    runtime = make_runtime(make_store(*cliques(4)), gangs)
    first = admit(runtime, member("w-0", "llm", 3))
    second = admit(runtime, member("w-1", "llm", 3))
    assert first.allowed and second.allowed
    assert first.pod["spec"] == second.pod["spec"]
    assert len(gangs.records) == 1 and gangs.version == 1  # one write: the first member's


def test_promised_capacity_counts_as_used_for_the_next_gang() -> None:
    nodes = cliques(2, 2)  # two 8-GPU cliques
    gangs = MemoryGangStore()
    runtime = make_runtime(make_store(*nodes), gangs)
    assert admit(runtime, member("a-0", "a", 2)).allowed
    assert admit(runtime, member("b-0", "b", 2)).allowed
    rooms = {gangs.records["ml/a"].room, gangs.records["ml/b"].room}
    assert len(rooms) == 2  # never the same room
    # A third gang finds no room now: it is admitted, gated, and recorded without a room.
    third = admit(runtime, member("c-0", "c", 2))
    assert third.allowed and third.pod["spec"]["schedulingGates"] == [{"name": "kgwe.io/gang"}]
    assert gangs.records["ml/c"].room is None
    assert any("no NVLink room has space" in w for w in third.warnings)


def test_bound_pods_count_against_a_clique() -> None:
    nodes = cliques(2, 4)
    busy = bind(member("other", "x", None, accelerator=None), "rack0-tray0")  # 4 GPUs used in the small clique
    gangs = MemoryGangStore()
    runtime = make_runtime(make_store(*nodes, busy), gangs)
    assert admit(runtime, member("w-0", "llm", 2)).allowed
    assert gangs.records["ml/llm"].room.value == clique_of(nodes, "rack1-tray0")


def test_a_gang_no_clique_could_ever_hold_is_refused_naming_the_largest() -> None:
    nodes = cliques(2, 18)  # 8 and 72 GPUs
    gangs = MemoryGangStore()
    runtime = make_runtime(make_store(*nodes), gangs)
    result = admit(runtime, member("w-0", "huge", 19))  # 76 GPUs
    assert not result.allowed
    assert "19 pods x 4 GPUs = 76 GPUs" in result.message
    assert f"the largest NVLink clique, {clique_of(nodes, 'rack1-tray0')}, has 72 GPUs" in result.message
    assert gangs.records == {}


def test_dry_run_records_nothing() -> None:
    gangs = MemoryGangStore()
    runtime = make_runtime(make_store(*cliques(2)), gangs)
    result = admit(runtime, member("w-0", "llm", 2), dry_run=True)
    assert result.allowed and result.pod["spec"]["schedulingGates"] == [{"name": "kgwe.io/gang"}]
    assert gangs.records == {} and gangs.version == 0


def test_a_gang_that_fits_one_nodes_nvlink_domain_may_use_a_single_node() -> None:
    gangs = MemoryGangStore()
    runtime = make_runtime(make_store(h100_node("dgx-1"), h100_node("dgx-2", gpus=4)), gangs)
    result = admit(runtime, member("w-0", "small", 2, gpus=2, accelerator=H100))
    assert result.allowed, result.message
    room = gangs.records["ml/small"].room
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
    gangs = MemoryGangStore()
    runtime = make_runtime(make_store(*cliques(2)), gangs)
    result = admit(runtime, member("w-0", "llm", None))
    assert result.allowed
    spec = result.pod["spec"]
    assert "schedulingGates" not in spec
    assert spec["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] == [
        {"labelSelector": {"matchLabels": {"kgwe.io/gang": "llm"}}, "topologyKey": "kgwe.io/nvlink-clique"}
    ]
    assert gangs.records == {}


def test_kueue_managed_gangs_get_the_topology_request_instead_of_a_gate() -> None:
    gangs = MemoryGangStore()
    runtime = make_runtime(make_store(*cliques(2)), gangs)
    pod = member("w-0", "llm", 2, labels={"kueue.x-k8s.io/queue-name": "training"})
    result = admit(runtime, pod)
    assert result.allowed
    assert "schedulingGates" not in result.pod["spec"]
    assert result.pod["metadata"]["annotations"]["kueue.x-k8s.io/podset-required-topology"] == "kgwe.io/nvlink-clique"
    assert result.pod["metadata"]["labels"]["kgwe.io/gang"] == "llm"
    assert gangs.records == {}  # Kueue places the gang; KGWE promises nothing


def test_a_second_pass_changes_nothing() -> None:
    runtime = make_runtime(make_store(*cliques(2)))
    once = admit(runtime, member("w-0", "llm", 2)).pod
    assert runtime.admission.mutate(decode_review(review(once))).patch == []


def test_the_gang_is_sized_by_its_largest_member() -> None:
    gangs = MemoryGangStore()
    runtime = make_runtime(make_store(*cliques(4)), gangs)
    leader = member("leader", "lws", 3, gpus=0)
    leader["spec"]["containers"][0]["resources"] = {}
    assert admit(runtime, leader).allowed
    assert gangs.records["ml/lws"].gpus_per_pod == 0
    assert admit(runtime, member("worker-0", "lws", 3, gpus=4)).allowed
    assert gangs.records["ml/lws"].gpus_per_pod == 4


class DownStore(MemoryGangStore):
    def read(self, *, timeout: float | None = None) -> Versioned:
        raise GangStoreUnavailable("the API server is not answering")


def test_an_unreachable_store_admits_the_member_gated_with_a_warning() -> None:
    runtime = make_runtime(make_store(*cliques(2)), DownStore())
    result = admit(runtime, member("w-0", "llm", 2))
    assert result.allowed
    assert result.pod["spec"]["schedulingGates"] == [{"name": "kgwe.io/gang"}]
    assert any("could not be written" in w and "waits gated" in w for w in result.warnings)
