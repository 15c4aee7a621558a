"""The quota controller through the API (SPEC section 10): two replicas, each with its own watch of one fake API
server (which refuses stale writes and what Kubernetes refuses of gated pods), one Lease between them.

The example cluster: team-a may use 8 H100s and 2 A100s, `train-llm-0` runs on 4 H100s.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from cluster_dirs import admitted
from kube_fake_apiserver import FakeApiServer, pod_update_problem, serving_cluster
from kubernetes import client as k8s_client
from patience import WAIT_SECONDS
from waiting import eventually

from webhook.assembly import build_runtime
from webhook.cluster.kube_source import KubeClusterSource
from webhook.cluster.model import ClusterStore
from webhook.config import Config, load_config
from webhook.controllers.leader import LeaderElector
from webhook.quotas.controller import QuotaController
from webhook.quotas.writer import kube_quota_writer

ROOT = Path(__file__).resolve().parents[2]
GATE = "kgwe.io/quota"
H100 = {"kgwe.io/accelerator": "nvidia-h100-80gb"}


@dataclass
class Replica:
    store: ClusterStore
    source: KubeClusterSource
    elector: LeaderElector
    controller: QuotaController
    client: k8s_client.ApiClient

    def start(self) -> None:
        self.source.start()
        assert self.source.wait_loaded(WAIT_SECONDS)
        self.elector.start()
        self.controller.task.start()

    def crash(self) -> None:
        """Die without a word: no lease released, nothing finished."""
        self.elector.task.signal_stop()
        self.elector._leader_until = 0.0  # what a process that is gone no longer claims
        self.controller.task.signal_stop()
        self.source.stop()

    def stop(self) -> None:
        self.controller.task.stop()
        self.elector.stop()
        self.source.stop()
        self.client.close()


# (lease_seconds, renew_deadline_seconds). Steady: the elector's own defaults, so a leader a busy machine runs
# late for a second or two keeps its lease; with 2 s and 1.5 s it could step down and the other replica take
# over mid-test, which the tests that count the leader's writes cannot tell from a double write.
STEADY_LEASE = (15.0, 10.0)
# Short, for the test of a takeover: it waits for the dead leader's lease to run out.
FAILOVER_LEASE = (2.0, 1.5)


def replica(server: FakeApiServer, config: Config, name: str, lease: tuple[float, float] = STEADY_LEASE
            ) -> Replica:
    configuration = k8s_client.Configuration()
    configuration.host = server.url
    client = k8s_client.ApiClient(configuration)
    store = ClusterStore(config.accelerator_table(), min_rebuild_interval=0.0)
    source = KubeClusterSource(store, client)
    elector = LeaderElector(client, namespace="kgwe-system", identity=name, lease_seconds=lease[0],
                            renew_deadline_seconds=lease[1], retry_seconds=0.1)
    controller = QuotaController(store, config, kube_quota_writer(client), is_leader=elector.is_leader,
                                 position_refresh_seconds=0.2)
    elector.on_change = lambda leader: controller.wake() if leader else None
    return Replica(store, source, elector, controller, client)


@pytest.fixture
def config() -> Config:
    return load_config(ROOT / "examples" / "config.yaml")


def two_replicas(config: Config, lease: tuple[float, float]) -> Iterator[tuple[FakeApiServer, list[Replica]]]:
    server = serving_cluster(ROOT / "examples" / "cluster")
    replicas = [replica(server, config, "a", lease), replica(server, config, "b", lease)]
    for r in replicas:
        r.start()
    yield server, replicas
    for r in replicas:
        r.stop()
    server.close()


@pytest.fixture
def cluster(config: Config) -> Iterator[tuple[FakeApiServer, list[Replica]]]:
    yield from two_replicas(config, STEADY_LEASE)


@pytest.fixture
def failing_over(config: Config) -> Iterator[tuple[FakeApiServer, list[Replica]]]:
    yield from two_replicas(config, FAILOVER_LEASE)


def gpu_pod(name: str, gpus: int, annotations: dict[str, str], namespace: str = "team-a") -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "annotations": dict(annotations)},
            "spec": {"containers": [{"name": "main", "image": "cuda",
                                     "resources": {"limits": {"nvidia.com/gpu": gpus}}}]}}


def gated(server: FakeApiServer, namespace: str = "team-a") -> set[str]:
    return {k for k, p in server.objects("Pod").items() if k.startswith(f"{namespace}/")
            and GATE in [g["name"] for g in p["spec"].get("schedulingGates") or []]}


def released(server: FakeApiServer, prefix: str) -> set[str]:
    return {k for k, p in server.objects("Pod").items() if k.startswith(prefix)
            and GATE not in [g["name"] for g in p["spec"].get("schedulingGates") or []]}


def test_concurrent_pods_through_two_replicas_never_exceed_the_limit_and_the_rest_wait_saying_why(
    cluster: tuple[FakeApiServer, list[Replica]], config: Config
) -> None:
    server, _replicas = cluster
    pods = [admitted(config, gpu_pod(f"job-{i:02d}", 1, H100), f"2026-11-29T00:00:{i:02d}Z") for i in range(12)]
    writers = [threading.Thread(target=server.put, args=("Pod", p)) for p in pods]
    for w in writers:
        w.start()
    for w in writers:
        w.join()
    # 4 H100s of 8 are in use (train-llm-0): four start, never more. Which four is not fixed: the twelve reach
    # the API server (and its watch) in whatever order their threads ran, and a pass releases, in creation
    # order, the pods it has seen; a pod created earlier that the watch has not delivered yet cannot be
    # waited for (a real API server stamps creationTimestamp on arrival, so there the two orders agree).
    eventually(lambda: len(released(server, "team-a/job-")) == 4, what="four released")
    first = released(server, "team-a/job-")
    waiting = sorted({p["metadata"]["namespace"] + "/" + p["metadata"]["name"] for p in pods} - first)
    eventually(lambda: all(_condition(server, key) for key in waiting), what="conditions")
    assert released(server, "team-a/job-") == first
    # Once every pod is seen, the waiting ones queue in creation order (their names sort the same way).
    eventually(lambda: _condition(server, waiting[1]) == {
        "type": "kgwe.io/QuotaAvailable", "status": "False", "reason": "WaitingForQuota",
        "message": "team-a: nvidia-h100-80gb 8 of 8 GPUs in use; this pod asks 1; 2nd in line",
    }, what="the second waiting pod's place in line")
    assert any(e["reason"] == "WaitingForQuota" and e["involvedObject"]["name"] == waiting[0].split("/")[1]
               for e in server.posted_events)
    eventually(lambda: len(server.objects("TenantQuota")["team-a"]["status"]["waiting"]) == 8, what="status")
    status = server.objects("TenantQuota")["team-a"]["status"]
    assert {"acceleratorType": "nvidia-h100-80gb", "gpus": "8"} in status["used"]
    assert status["waiting"][0] == {"name": waiting[0], "kind": "pod", "pods": 1, "gpus": "1",
                                    "reason": "nvidia-h100-80gb 8 of 8 GPUs in use; this pod asks 1"}
    # Only the leader wrote: every release is one patch, never two for one pod.
    patches = [r for r in server.requests if r.method == "PATCH"
               and r.path.startswith("/api/v1/namespaces/team-a/pods/job-") and not r.path.endswith("/status")]
    assert len(patches) == 4
    # Room frees when a pod ends: the four oldest that wait start, no more.
    running = server.objects("Pod")["team-a/train-llm-0"]
    running["status"] = {"phase": "Succeeded"}
    server.put("Pod", running)
    eventually(lambda: len(released(server, "team-a/job-")) == 8, what="four more released")
    assert released(server, "team-a/job-") == first | set(waiting[:4])


def test_a_pod_of_several_types_is_pinned_to_the_type_with_quota_left(
    cluster: tuple[FakeApiServer, list[Replica]], config: Config
) -> None:
    server, _replicas = cluster
    either = {"kgwe.io/accelerator": "nvidia-h100-80gb,nvidia-a100-80gb", "kgwe.io/gpu-memory": "10Gi"}
    server.put("Pod", admitted(config, gpu_pod("fill", 4, H100), "2026-11-29T00:00:00Z"))
    eventually(lambda: "team-a/fill" in released(server, "team-a/"), what="fill released")
    server.put("Pod", admitted(config, gpu_pod("either", 1, either), "2026-11-29T00:00:01Z"))
    eventually(lambda: "team-a/either" in released(server, "team-a/either"), what="either released")
    pod = server.objects("Pod")["team-a/either"]
    assert pod["metadata"]["annotations"]["kgwe.io/accelerator-type"] == "nvidia-a100-80gb"
    terms = pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"]
    assert all({"key": "nvidia.com/gpu.product", "operator": "In", "values": ["NVIDIA-A100-SXM4-80GB"]}
               in t["matchExpressions"] for t in terms), terms


def test_the_leader_dies_and_the_other_replica_releases_from_the_apis_state(
    failing_over: tuple[FakeApiServer, list[Replica]], config: Config
) -> None:
    server, replicas = failing_over
    leaders: list[Replica] = []

    def found_leader() -> bool:
        # Read once per look: with the short lease, who leads may change between two looks on a busy machine.
        leaders[:] = [r for r in replicas if r.elector.is_leader()]
        return bool(leaders)

    eventually(found_leader, what="a leader")
    leader = leaders[0]
    other = next(r for r in replicas if r is not leader)
    leader.crash()
    for i in range(6):
        server.put("Pod", admitted(config, gpu_pod(f"late-{i}", 1, H100), f"2026-11-29T00:01:0{i}Z"))
    eventually(lambda: other.elector.is_leader(), what="takeover")
    eventually(lambda: len(released(server, "team-a/late-")) == 4, what="released after takeover")
    eventually(lambda: len(gated(server)) == 2, what="two wait")
    assert released(server, "team-a/late-") == {f"team-a/late-{i}" for i in range(4)}


def test_what_kubernetes_refuses_of_a_gated_pod_the_fake_refuses_too() -> None:
    gated_pod = {"spec": {"schedulingGates": [{"name": GATE}], "nodeSelector": {"a": "1"},
                          "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                              "nodeSelectorTerms": [{"matchExpressions": [{"key": "k", "operator": "In",
                                                                           "values": ["x"]}]}]}}}}}
    changed = copy.deepcopy(gated_pod)
    changed["spec"]["nodeSelector"]["a"] = "2"
    assert "only additions" in str(pod_update_problem(gated_pod, changed))
    new_term = copy.deepcopy(gated_pod)
    new_term["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"].append({"matchExpressions": [{"key": "z", "operator": "Exists"}]})
    assert "NodeSelectorTerms" in str(pod_update_problem(gated_pod, new_term))
    regated = copy.deepcopy(gated_pod)
    regated["spec"]["schedulingGates"].append({"name": "other"})
    assert "only deletion" in str(pod_update_problem(gated_pod, regated))
    released_pod = {"spec": {"nodeSelector": {"a": "1"}}}
    assert pod_update_problem(released_pod, {"spec": {"nodeSelector": {"a": "1", "b": "2"}}}) is not None


def _condition(server: FakeApiServer, key: str) -> dict[str, Any] | None:
    pod = server.objects("Pod").get(key) or {}
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "kgwe.io/QuotaAvailable":
            return {k: condition[k] for k in ("type", "status", "reason", "message")}
    return None


def test_a_sized_gang_is_released_whole_once_every_member_exists(
    cluster: tuple[FakeApiServer, list[Replica]], config: Config
) -> None:
    server, _replicas = cluster
    gang = {"kgwe.io/accelerator": "nvidia-gb200-186gb", "kgwe.io/gang": "llm", "kgwe.io/gang-size": "2"}
    # ml-research holds 14 of its 16 GB200s (examples/cluster): a gang of 2 x 1 GPU fits, once it is whole.
    first = admitted(config, gpu_pod("llm-0", 1, gang, namespace="ml-research"), "2026-11-29T00:02:00Z")
    assert {"name": GATE} in first["spec"]["schedulingGates"]
    server.put("Pod", first)
    eventually(lambda: _condition(server, "ml-research/llm-0") is not None, what="the first member told")
    assert "gang llm has 1 of its 2 pods; it is released whole" in str(_condition(server, "ml-research/llm-0"))
    assert "ml-research/llm-0" in gated(server, "ml-research")
    server.put("Pod", admitted(config, gpu_pod("llm-1", 1, gang, namespace="ml-research"), "2026-11-29T00:02:01Z"))
    eventually(lambda: released(server, "ml-research/llm-") == {"ml-research/llm-0", "ml-research/llm-1"},
               what="the whole gang released")


def test_only_pods_that_hold_or_wait_for_quota_wake_the_controller(config: Config) -> None:
    from webhook.quotas.controller import _holds_or_waits

    cpu = {"spec": {"containers": [{"name": "m", "resources": {"limits": {"cpu": "2", "memory": "1Gi"}}}]}}
    assert not _holds_or_waits(cpu)
    assert _holds_or_waits(gpu_pod("g", 1, H100))
    assert _holds_or_waits({"spec": {"containers": [{"name": "m", "resources": {"limits": {
        "deviceclass.resource.kubernetes.io/gpu.nvidia.com": "1"}}}]}})
    assert _holds_or_waits({"spec": {"schedulingGates": [{"name": GATE}], "containers": []}})
    assert _holds_or_waits({"spec": {"resourceClaims": [{"name": "c", "resourceClaimName": "x"}], "containers": []}})


def test_a_replica_that_stops_leading_drops_its_kept_reads(config: Config) -> None:
    """The task runs no pass while the replica does not lead; its wakes then drop the kept reads, and the
    first pass as leader again reads every pod."""
    store = build_runtime(config, ROOT / "examples" / "cluster", load_policies=False).store
    leading = [True]
    controller = QuotaController(store, config, None, is_leader=lambda: leading[0])
    controller.reconcile_once()
    assert controller._index._reads
    leading[0] = False
    controller.task.wake()
    eventually(lambda: not controller._index._reads, what="the reads dropped")
    controller.task.stop()
    assert controller._index.take().everything
