"""KGWE's ResourceClaimTemplates and ComputeDomains are deleted once no unfinished pod names them for the
grace period, with resourceVersion preconditions, against the fake API server (objects as v1.36 and
NVIDIA's driver serve them); one deleted as a pod was admitted is created again."""

from __future__ import annotations

import copy
from collections.abc import Iterable, Iterator
from typing import Any

import pytest
from kube_fake_apiserver import FakeApiServer
from kubernetes import client as k8s_client
from waiting import eventually

from policies.vocabulary.accelerator_types import AcceleratorTable
from webhook.cluster.kube_json import KubeJson
from webhook.cluster.kube_source import KubeClusterSource
from webhook.cluster.model import ClusterStore
from webhook.config import Config
from webhook.controllers.runner import build_controllers
from webhook.dra.garbage import ClaimGarbageCollector

GRACE = 600.0
MANAGED = {"app.kubernetes.io/managed-by": "kgwe"}


def template(name: str, labels: dict[str, str] | None = None, namespace: str = "team-a") -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": namespace, "labels": MANAGED if labels is None else labels},
        "spec": {"spec": {"devices": {"requests": [
            {"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": 1}}]}}},
    }


def domain(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "resource.nvidia.com/v1beta1", "kind": "ComputeDomain",
        "metadata": {"name": name, "namespace": "team-a", "labels": {**MANAGED, "kgwe.io/gang": name}},
        "spec": {"numNodes": 2, "channel": {"resourceClaimTemplate": {"name": f"{name}-channel"}}},
    }


def pod(name: str, templates: list[str], phase: str = "Running", gated: bool = False) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "containers": [{"name": "main", "image": "cuda",
                        "resources": {"claims": [{"name": f"c{i}"} for i in range(len(templates))]}}],
        "resourceClaims": [{"name": f"c{i}", "resourceClaimTemplateName": t} for i, t in enumerate(templates)],
    }
    if gated:
        spec["schedulingGates"] = [{"name": "kgwe.io/gang"}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "team-a"}, "spec": spec,
            "status": {"phase": phase}}


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Cluster:
    def __init__(self, server: FakeApiServer, store: ClusterStore, api: KubeJson) -> None:
        self.server, self.store, self.api = server, store, api
        self.clock = Clock()
        self.collector = ClaimGarbageCollector(store, api, grace_seconds=GRACE, clock=self.clock)

    def sweep_at(self, offset: float) -> None:
        self.clock.now = 1000.0 + offset
        self.collector.sweep()

    def names(self, kind: str) -> set[str]:
        return {k.split("/", 1)[1] for k in self.server.objects(kind)}

    def pods_seen(self) -> None:
        def versions(pods: dict[str, dict[str, Any]]) -> dict[str, str]:
            return {k: p["metadata"]["resourceVersion"] for k, p in pods.items()}

        wanted = versions(self.server.objects("Pod"))
        eventually(lambda: versions(self.store.snapshot(force=True).pods) == wanted, what="the model caught up")


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    server = FakeApiServer().start()
    configuration = k8s_client.Configuration()
    configuration.host = server.url
    with k8s_client.ApiClient(configuration) as client:
        store = ClusterStore(AcceleratorTable.build(), min_rebuild_interval=0)
        source = KubeClusterSource(store, client, kinds=("Node", "Pod", "Namespace"))
        source.start()
        try:
            assert source.wait_loaded(20)
            yield Cluster(server, store, KubeJson(client))
        finally:
            source.stop()
            server.close()


def test_unused_objects_go_after_the_grace_and_used_or_foreign_ones_stay(cluster: Cluster) -> None:
    server = cluster.server
    for name in ("kgwe-used", "kgwe-unused", "kgwe-finished"):
        server.put("ResourceClaimTemplate", template(name))
    server.put("ResourceClaimTemplate", template("mine", labels={}))  # a user's: not KGWE's
    server.put("ResourceClaimTemplate", template("labelled", labels=MANAGED))  # labelled, not a name KGWE gives
    server.put("ComputeDomain", domain("kgwe-cd-live"))
    server.put("ComputeDomain", domain("kgwe-cd-done"))
    server.put("Pod", pod("runs", ["kgwe-used"]))
    server.put("Pod", pod("done", ["kgwe-finished", "kgwe-cd-done-channel"], phase="Succeeded"))
    # A gang member still gated names its domain's channel template: the domain is in use.
    server.put("Pod", pod("member-0", ["kgwe-cd-live-channel"], phase="Pending", gated=True))
    cluster.pods_seen()

    cluster.sweep_at(0)
    cluster.sweep_at(GRACE - 1)
    assert {"kgwe-unused", "kgwe-finished"} <= cluster.names("ResourceClaimTemplate")
    assert cluster.names("ComputeDomain") == {"kgwe-cd-live", "kgwe-cd-done"}

    cluster.sweep_at(GRACE)
    assert cluster.names("ResourceClaimTemplate") == {"kgwe-used", "mine", "labelled"}
    assert cluster.names("ComputeDomain") == {"kgwe-cd-live"}
    deletes = [r for r in server.requests if r.method == "DELETE"]
    assert len(deletes) == 3
    for request in deletes:  # each delete names the uid and resourceVersion it judged
        assert set(request.body["preconditions"]) == {"uid", "resourceVersion"}


def test_a_template_named_again_during_the_grace_starts_over(cluster: Cluster) -> None:
    cluster.server.put("ResourceClaimTemplate", template("kgwe-again"))
    cluster.sweep_at(0)
    cluster.server.put("Pod", pod("p", ["kgwe-again"]))
    cluster.pods_seen()
    cluster.sweep_at(GRACE / 2)
    cluster.server.delete("Pod", "team-a/p")
    cluster.pods_seen()
    cluster.sweep_at(GRACE)  # unused again from here
    cluster.sweep_at(GRACE + GRACE / 2)
    assert "kgwe-again" in cluster.names("ResourceClaimTemplate")
    cluster.sweep_at(2 * GRACE)
    assert "kgwe-again" not in cluster.names("ResourceClaimTemplate")


class ChangesBeforeDelete:
    """The API, with the template rewritten (a new resourceVersion) between the sweep's list and delete."""

    def __init__(self, api: KubeJson, server: FakeApiServer) -> None:
        self.api, self.server = api, server

    def request(self, method: str, path: str, *, query: Iterable[tuple[str, str]] = (),
                body: dict[str, Any] | None = None, timeout: float | tuple[float, float] | None = None,
                ) -> dict[str, Any]:
        if method == "DELETE":
            key = "/".join(path.split("/")[-3::2])  # namespace/name
            changed = copy.deepcopy(self.server.objects("ResourceClaimTemplate")[key])
            changed["metadata"]["labels"] = {**changed["metadata"]["labels"], "touched": "yes"}
            self.server.put("ResourceClaimTemplate", changed)
        return self.api.request(method, path, query=query, body=body, timeout=timeout)


def test_a_template_changed_under_the_delete_is_kept_by_the_precondition(cluster: Cluster) -> None:
    cluster.server.put("ResourceClaimTemplate", template("kgwe-raced"))
    cluster.collector.api = ChangesBeforeDelete(cluster.api, cluster.server)
    cluster.sweep_at(0)
    cluster.sweep_at(GRACE)
    assert "kgwe-raced" in cluster.names("ResourceClaimTemplate")  # 409 Conflict: kept
    cluster.collector.api = cluster.api
    cluster.sweep_at(GRACE + 1)  # judged again from scratch: a new grace period
    assert "kgwe-raced" in cluster.names("ResourceClaimTemplate")
    cluster.sweep_at(2 * GRACE + 1)
    assert "kgwe-raced" not in cluster.names("ResourceClaimTemplate")


def test_a_recreated_template_is_a_new_one(cluster: Cluster) -> None:
    cluster.server.put("ResourceClaimTemplate", template("kgwe-new"))
    cluster.sweep_at(0)
    cluster.server.delete("ResourceClaimTemplate", "team-a/kgwe-new")
    fresh = template("kgwe-new")
    fresh["metadata"]["uid"] = "a-new-uid"
    cluster.server.put("ResourceClaimTemplate", fresh)
    cluster.sweep_at(GRACE)
    assert "kgwe-new" in cluster.names("ResourceClaimTemplate")


def test_a_pod_admitted_as_its_template_was_deleted_gets_it_back(cluster: Cluster) -> None:
    cluster.server.put("ResourceClaimTemplate", template("kgwe-late"))
    cluster.server.put("ComputeDomain", domain("kgwe-cd-late"))
    cluster.sweep_at(0)
    cluster.sweep_at(GRACE)
    assert "kgwe-late" not in cluster.names("ResourceClaimTemplate")
    assert "kgwe-cd-late" not in cluster.names("ComputeDomain")
    # Admitted while the template was still there; created just after the delete.
    cluster.server.put("Pod", pod("late", ["kgwe-late", "kgwe-cd-late-channel"], phase="Pending"))
    cluster.pods_seen()
    cluster.sweep_at(GRACE + 60)
    back = cluster.server.objects("ResourceClaimTemplate")["team-a/kgwe-late"]
    assert back["spec"] == template("kgwe-late")["spec"]
    assert back["metadata"]["labels"] == MANAGED
    assert cluster.server.objects("ComputeDomain")["team-a/kgwe-cd-late"]["spec"] == domain("kgwe-cd-late")["spec"]


def test_nothing_is_judged_before_the_pods_are_listed() -> None:
    store = ClusterStore(AcceleratorTable.build(), min_rebuild_interval=0)

    class NoApi:
        def request(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
            raise AssertionError("the sweep asked the API before the model had the pods")

    ClaimGarbageCollector(store, NoApi(), grace_seconds=GRACE).sweep()


def test_the_leader_runs_the_sweep_unless_configured_off() -> None:
    configuration = k8s_client.Configuration()
    configuration.host = "http://127.0.0.1:9"
    store = ClusterStore(AcceleratorTable.build(), min_rebuild_interval=0)
    with k8s_client.ApiClient(configuration) as client:
        on = build_controllers(store, Config(), client, namespace="kgwe", registry=None)
        garbage = on.wing("dra-garbage")
        assert garbage is not None and isinstance(garbage.controller, ClaimGarbageCollector)
        assert garbage.task.leader_only and garbage.task in on.tasks()
        off = build_controllers(store, Config.model_validate({"dra": {"removeUnused": False}}), client,
                                namespace="kgwe", registry=None)
        assert off.wing("dra-garbage") is None
    with pytest.raises(ValueError):
        Config.model_validate({"dra": {"unusedGraceSeconds": 60}})
