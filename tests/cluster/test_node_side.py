"""The node side of a snapshot (facts, type index) is kept while only kinds it does not read change (pods,
Namespaces, TenantQuotas), and read again on a change to one it reads (nodes, ResourceSlices, ResourceClaims;
webhook/cluster/node_side.py; issue 36). Each snapshot is compared with one a fresh store builds from the
same objects: keeping the node side must never change what a snapshot says."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from cluster_dirs import ROOT

from webhook import assembly
from webhook.cluster.model import ClusterModel, ClusterStore
from webhook.config import load_config

CONFIG = load_config(ROOT / "examples" / "config.yaml")


def _objects(directory: Path) -> list[dict[str, Any]]:
    return [doc for path in sorted(directory.glob("*.yaml")) for doc in yaml.safe_load_all(path.read_text()) if doc]


def _store(objects: list[dict[str, Any]]) -> ClusterStore:
    store = assembly.new_store(CONFIG)
    store.min_rebuild_interval = 0.0
    store.replace_all(copy.deepcopy(objects))
    return store


def _same_as_fresh(store: ClusterStore) -> ClusterModel:
    model = store.snapshot(force=True)
    kinds = ("Node", "Pod", "Namespace", "ResourceSlice", "ResourceClaim", "DeviceClass", "HardwareProfile",
             "TenantQuota")
    fresh = _store([o for kind in kinds for o in store.objects(kind)]).snapshot(force=True)
    assert model.nodes == fresh.nodes
    assert model.types == fresh.types
    assert model.node_objects == fresh.node_objects
    assert model.pods == fresh.pods
    return model


def _first(store: ClusterStore, kind: str, test: Any = lambda _o: True) -> dict[str, Any]:
    return copy.deepcopy(next(o for o in store.objects(kind) if test(o)))


@pytest.mark.parametrize("cluster", ["cluster", "cluster-dra"])
def test_a_snapshot_says_what_a_fresh_store_says_through_pod_node_and_other_changes(cluster: str) -> None:
    store = _store(_objects(ROOT / "examples" / cluster))
    before = _same_as_fresh(store)

    pods = store.objects("Pod")
    pod = copy.deepcopy(pods[0]) if pods else {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "new", "namespace": "default"},
        "spec": {"containers": [{"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}
    pod["metadata"]["resourceVersion"] = "pod-changed"
    pod.setdefault("status", {})["phase"] = "Succeeded"
    store.upsert(pod)
    after_pod = _same_as_fresh(store)
    assert after_pod.generation > before.generation
    assert after_pod.nodes is before.nodes  # only a pod changed: the node side was kept

    node = _first(store, "Node", lambda n: "nvidia.com/gpu" in str(n))
    node["metadata"]["resourceVersion"] = "node-cordoned"
    node.setdefault("spec", {})["unschedulable"] = True
    store.upsert(node)
    cordoned = _same_as_fresh(store)
    assert cordoned.nodes[node["metadata"]["name"]].unschedulable

    store.delete(node)
    gone = _same_as_fresh(store)
    assert node["metadata"]["name"] not in gone.nodes

    namespace = _first(store, "Namespace")
    namespace["metadata"]["resourceVersion"] = "namespace-relabelled"
    namespace["metadata"].setdefault("labels", {})["kgwe.io/default-sharing"] = "mps"
    store.upsert(namespace)
    relabelled = _same_as_fresh(store)
    assert relabelled.nodes is gone.nodes and relabelled.types is gone.types  # the node side reads no Namespace

    # The quota controller writes a TenantQuota's status after its passes: that keeps the node side too.
    quota = {"apiVersion": "kgwe.io/v1alpha1", "kind": "TenantQuota", "metadata": {"name": "node-side"},
             "spec": {"tenant": "team-a", "namespaces": ["team-a"], "limits": [{"gpus": 4}]}}
    store.upsert(quota)
    store.upsert({**quota, "metadata": {"name": "node-side", "resourceVersion": "2"}, "status": {"used": []}})
    quotas_written = _same_as_fresh(store)
    assert quotas_written.nodes is gone.nodes and quotas_written.tenant_quotas["node-side"]["status"] == {"used": []}

    if store.objects("ResourceClaim"):
        claim = _first(store, "ResourceClaim")
        store.delete(claim)
        _same_as_fresh(store)
    store.replace_kind("Pod", [])
    _same_as_fresh(store)
