"""Mode apply against the fake API server: `nvidia.com/mig.config` set only on idle nodes, with the node's
resourceVersion; a node that got a pod since the plan is skipped; a 409 is handled; status records the plan."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml
from kube_fake_apiserver import FakeApiServer

from policies.vocabulary.accelerator_types import default_table
from webhook.cluster.kube_json import KubeJson
from webhook.cluster.model import ClusterStore
from webhook.migplan.apply import MigApplier

CLUSTER = Path(__file__).parent / "cluster"
LABEL = "nvidia.com/mig.config"


def _load(apiserver: FakeApiServer, mode: str = "apply") -> ClusterStore:
    for path in sorted(CLUSTER.glob("*.yaml")):
        for obj in yaml.safe_load_all(path.read_text()):
            if obj["kind"] == "MIGStrategy":
                obj = copy.deepcopy(obj)
                obj["spec"]["mode"] = mode
            apiserver.put(obj["kind"], obj)
    return _store_from(apiserver)


def _store_from(apiserver: FakeApiServer) -> ClusterStore:
    store = ClusterStore(default_table(), min_rebuild_interval=0)
    for kind in ("Node", "Pod", "MIGStrategy"):
        store.replace_kind(kind, apiserver.objects(kind).values())
    return store


def _labels(apiserver: FakeApiServer) -> dict[str, str]:
    return {name: node["metadata"]["labels"].get(LABEL) for name, node in apiserver.objects("Node").items()}


def _applier(store: ClusterStore, api_client: Any, now: float = 1_800_000_000.0) -> MigApplier:
    return MigApplier(store, KubeJson(api_client), lambda: True, clock=lambda: now)


def test_only_idle_nodes_are_labelled(apiserver: FakeApiServer, api_client: Any) -> None:
    store = _load(apiserver)
    before = _labels(apiserver)
    done = _applier(store, api_client).run_pass()
    after = _labels(apiserver)
    labelled = {d.node for d in done if d.outcome == "labelled"}
    assert labelled == {"a100-idle-1", "h100-single"}
    assert after["a100-busy"] == before["a100-busy"] and after["a100-idle-2"] == before["a100-idle-2"]
    assert after["a100-idle-1"].startswith("kgwe-a100-80gb-") and after["h100-single"].startswith("kgwe-h100-80gb-")
    patches = [r for r in apiserver.requests if r.method == "PATCH" and r.path.startswith("/api/v1/nodes/")]
    assert all(r.body["metadata"]["resourceVersion"] for r in patches)
    assert {r.path.rsplit("/", 1)[1] for r in patches} == labelled  # nothing else touched
    status = apiserver.objects("MIGStrategy")["inference-pool"]["status"]
    rows = {row["node"]: row for row in status["nodes"]}
    assert rows["a100-idle-1"]["applied"] and rows["a100-busy"]["action"] == "keep"


def test_recommend_mode_labels_nothing(apiserver: FakeApiServer, api_client: Any) -> None:
    store = _load(apiserver, mode="recommend")
    before = _labels(apiserver)
    assert _applier(store, api_client).run_pass() == []
    assert _labels(apiserver) == before


def test_a_node_that_got_a_pod_meanwhile_is_skipped(apiserver: FakeApiServer, api_client: Any) -> None:
    store = _load(apiserver)
    # Bound after the store was read: only the API knows it when the applier is about to write.
    apiserver.put("Pod", {"metadata": {"name": "late", "namespace": "team-a"},
                          "spec": {"nodeName": "a100-idle-1", "containers": [
                              {"name": "c", "resources": {"limits": {"nvidia.com/mig-1g.10gb": "1"}}}]},
                          "status": {"phase": "Pending"}})
    done = {d.node: d for d in _applier(store, api_client).run_pass()}
    assert done["a100-idle-1"].outcome == "skipped" and "team-a/late" in done["a100-idle-1"].reason
    assert _labels(apiserver)["a100-idle-1"] == "all-balanced"


def test_a_conflict_is_a_skip_not_a_failure(apiserver: FakeApiServer, api_client: Any) -> None:
    store = _load(apiserver)
    node = apiserver.objects("Node")["a100-idle-1"]
    node["metadata"]["labels"]["touched"] = "yes"
    apiserver.put("Node", node)  # a newer resourceVersion than the store's
    done = {d.node: d for d in _applier(store, api_client).run_pass()}
    assert done["a100-idle-1"].outcome == "skipped" and "409" in done["a100-idle-1"].reason
    assert _labels(apiserver)["a100-idle-1"] == "all-balanced"
    # Next pass, from the fresh node: labelled.
    again = {d.node: d for d in _applier(_store_from(apiserver), api_client).run_pass()}
    assert again["a100-idle-1"].outcome == "labelled"


def test_a_node_is_changed_at_most_once_per_rebalance_interval(apiserver: FakeApiServer, api_client: Any) -> None:
    store = _load(apiserver)
    _applier(store, api_client, now=1_800_000_000.0).run_pass()
    # The MIG manager has not re-partitioned yet: the plan still says change; too soon to write again.
    soon = {d.node: d for d in _applier(_store_from(apiserver), api_client, now=1_800_000_060.0).run_pass()}
    assert soon["a100-idle-1"].outcome == "skipped" and "rebalanceInterval" in soon["a100-idle-1"].reason


def test_kgwe_serve_runs_the_applier_on_the_leader_and_the_chart_grants_it_only_when_asked(
    apiserver: FakeApiServer, api_client: Any
) -> None:
    from chart_support import render

    from webhook.config import Config
    from webhook.controllers.runner import build_controllers

    controllers = build_controllers(_load(apiserver), Config(), api_client, namespace="kgwe-system", registry=None)
    assert controllers.mig is not None and controllers.mig in controllers.tasks()
    assert controllers.mig.leader_only

    def node_patch(values: dict[str, Any]) -> bool:
        role = render(values).one("ClusterRole", "kgwe-webhook")
        return any("nodes" in r.get("resources", []) and "patch" in r.get("verbs", []) for r in role["rules"])

    assert not node_patch({})
    assert node_patch({"webhook": {"migApply": {"enabled": True}}})
