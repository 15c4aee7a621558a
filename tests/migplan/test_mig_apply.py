"""Mode apply against the fake API server: `nvidia.com/mig.config` set only on idle nodes, with the node's
resourceVersion; a node that got a pod since the plan is skipped; a 409 is handled; status records the plan.
The config a label names is added to the MIG manager's ConfigMap first, by compare-and-swap, keeping every
other config; a missing ConfigMap or a config of that name that says something else stops the node."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml
from kube_fake_apiserver import FakeApiServer

from policies.vocabulary.accelerator_types import default_table
from webhook.cluster.kube_json import KubeJson
from webhook.cluster.model import ClusterStore
from webhook.config import MigManager
from webhook.migplan.apply import MigApplier
from webhook.migplan.views import plan_cluster

CLUSTER = Path(__file__).parent / "cluster"
LABEL = "nvidia.com/mig.config"
# The GPU operator's ConfigMap, as it ships (an excerpt of its configs).
OPERATOR_CONFIG = """version: v1
mig-configs:
  all-disabled:
    - devices: all
      mig-enabled: false
  all-1g.10gb:
    - devices: all
      mig-enabled: true
      mig-devices:
        "1g.10gb": 7
  custom-1g:
    - devices: [0]
      mig-enabled: true
      mig-devices: {"1g.10gb": 7}
"""
CONFIG_MAP = "/api/v1/namespaces/gpu-operator/configmaps/default-mig-parted-config"


def _load(apiserver: FakeApiServer, mode: str = "apply", config_map: bool = True) -> ClusterStore:
    for path in sorted(CLUSTER.glob("*.yaml")):
        for obj in yaml.safe_load_all(path.read_text()):
            if obj["kind"] == "MIGStrategy":
                obj = copy.deepcopy(obj)
                obj["spec"]["mode"] = mode
            apiserver.put(obj["kind"], obj)
    if config_map:
        apiserver.put("ConfigMap", {"metadata": {"name": "default-mig-parted-config", "namespace": "gpu-operator",
                                                 "labels": {"app": "nvidia-mig-manager"}},
                                    "data": {"config.yaml": OPERATOR_CONFIG, "other.yaml": "kept: true\n"}})
    return _store_from(apiserver)


def _mig_configs(apiserver: FakeApiServer) -> dict[str, Any]:
    stored = apiserver.objects("ConfigMap")["gpu-operator/default-mig-parted-config"]
    return yaml.safe_load(stored["data"]["config.yaml"])["mig-configs"]


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

    config = Config.model_validate({"migManager": {"configMap": "kgwe-mig", "namespace": "nvidia"}})
    controllers = build_controllers(_load(apiserver), config, api_client, namespace="kgwe-system", registry=None)
    assert controllers.mig is not None and controllers.mig in controllers.tasks()
    assert controllers.mig.leader_only
    applier = getattr(controllers.mig.body, "__self__", None)
    assert isinstance(applier, MigApplier) and applier.manager.namespace == "nvidia"

    def node_patch(values: dict[str, Any]) -> bool:
        role = render(values).one("ClusterRole", "kgwe-webhook")
        return any("nodes" in r.get("resources", []) and "patch" in r.get("verbs", []) for r in role["rules"])

    assert not node_patch({})
    assert node_patch({"webhook": {"migApply": {"enabled": True}}})
    # The MIG manager's ConfigMap: read and replaced, exactly that one, in its namespace, only when asked.
    assert not render({}).of_kind("Role") or "kgwe-webhook-mig-config" not in render({}).names("Role")
    for values, (namespace, name) in (
        ({"webhook": {"migApply": {"enabled": True}}}, ("gpu-operator", "default-mig-parted-config")),
        ({"webhook": {"migApply": {"enabled": True}},
          "config": {"migManager": {"configMap": "kgwe-mig", "namespace": "nvidia"}}}, ("nvidia", "kgwe-mig")),
    ):
        rendered = render(values)
        role = rendered.one("Role", "kgwe-webhook-mig-config")
        assert role["metadata"]["namespace"] == namespace
        assert role["rules"] == [{"apiGroups": [""], "resources": ["configmaps"], "resourceNames": [name],
                                  "verbs": ["get", "update"]}]
        binding = rendered.one("RoleBinding", "kgwe-webhook-mig-config")
        assert binding["metadata"]["namespace"] == namespace and binding["subjects"] == [
            {"kind": "ServiceAccount", "name": "kgwe-webhook", "namespace": "kgwe-system"}]
        # The replica reads the same ConfigMap from its configuration.
        config = yaml.safe_load(rendered.one("ConfigMap", "kgwe-config")["data"]["config.yaml"])
        assert (config["migManager"]["namespace"], config["migManager"]["configMap"]) == (namespace, name)


def test_the_config_joins_the_mig_managers_configmap_before_the_label(
    apiserver: FakeApiServer, api_client: Any
) -> None:
    store = _load(apiserver)
    read_version = apiserver.objects("ConfigMap")["gpu-operator/default-mig-parted-config"]["metadata"][
        "resourceVersion"]
    done = _applier(store, api_client).run_pass()
    labels = _labels(apiserver)
    configs = _mig_configs(apiserver)
    named = {labels[d.node] for d in done if d.outcome == "labelled"}
    assert len(named) == 2 and named <= set(configs)
    # Every config the operator shipped is still there, unchanged, first; the other key is untouched.
    shipped = yaml.safe_load(OPERATOR_CONFIG)["mig-configs"]
    assert list(configs)[:len(shipped)] == list(shipped) and all(configs[k] == v for k, v in shipped.items())
    stored = apiserver.objects("ConfigMap")["gpu-operator/default-mig-parted-config"]
    assert stored["data"]["other.yaml"] == "kept: true\n" and stored["metadata"]["labels"] == {
        "app": "nvidia-mig-manager"}
    # As the plan says it, per GPU group.
    plan = plan_cluster(store.snapshot(force=True))
    for name in named:
        assert configs[name] == plan.mig_config["mig-configs"][name]
    # Written by compare-and-swap (the resourceVersion read, then the one after the first write), each before
    # the label that names it.
    writes = [r for r in apiserver.requests if r.method in ("PUT", "PATCH")]
    puts = [r for r in writes if r.method == "PUT"]
    assert {r.path for r in puts} == {CONFIG_MAP} and len(puts) == 2
    assert puts[0].body["metadata"]["resourceVersion"] == read_version
    assert puts[1].body["metadata"]["resourceVersion"] not in ("", None, read_version)
    for node in ("a100-idle-1", "h100-single"):
        config = labels[node]
        first_put = next(i for i, r in enumerate(writes)
                         if r.method == "PUT" and config in r.body["data"]["config.yaml"])
        patch = next(i for i, r in enumerate(writes) if r.path == f"/api/v1/nodes/{node}")
        assert first_put < patch
    # A second pass finds the configs there and writes the ConfigMap no more.
    before = len([r for r in apiserver.requests if r.method == "PUT"])
    _applier(_store_from(apiserver), api_client, now=1_800_010_000.0).run_pass()
    assert len([r for r in apiserver.requests if r.method == "PUT"]) == before


class _Racing:
    """The API, with another writer adding a config to the ConfigMap between KGWE's read and its write."""

    def __init__(self, api: KubeJson, apiserver: FakeApiServer) -> None:
        self.api, self.apiserver, self.raced = api, apiserver, False

    def request(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        if method == "PUT" and not self.raced:
            self.raced = True
            current = copy.deepcopy(self.apiserver.objects("ConfigMap")["gpu-operator/default-mig-parted-config"])
            document = yaml.safe_load(current["data"]["config.yaml"])
            document["mig-configs"]["someone-else"] = [{"devices": "all", "mig-enabled": True,
                                                        "mig-devices": {"7g.80gb": 1}}]
            current["data"]["config.yaml"] = yaml.safe_dump(document)
            self.apiserver.put("ConfigMap", current)
        return self.api.request(method, path, **kwargs)


def test_a_configmap_changed_meanwhile_is_read_again_and_both_changes_stay(
    apiserver: FakeApiServer, api_client: Any
) -> None:
    store = _load(apiserver)
    racing = _Racing(KubeJson(api_client), apiserver)
    done = MigApplier(store, racing, lambda: True, clock=lambda: 1_800_000_000.0).run_pass()
    assert racing.raced and {d.node for d in done if d.outcome == "labelled"} == {"a100-idle-1", "h100-single"}
    configs = _mig_configs(apiserver)
    assert "someone-else" in configs and "all-disabled" in configs
    assert {_labels(apiserver)[n] for n in ("a100-idle-1", "h100-single")} <= set(configs)
    puts = [r for r in apiserver.requests if r.method == "PUT"]
    assert len(puts) == 3  # the first refused (409), read again, written; then the second config


def test_without_the_configmap_or_with_a_clashing_config_no_node_is_labelled(
    apiserver: FakeApiServer, api_client: Any
) -> None:
    store = _load(apiserver, config_map=False)
    before = _labels(apiserver)
    done = {d.node: d for d in _applier(store, api_client).run_pass()}
    assert done["a100-idle-1"].outcome == "skipped" and "does not exist" in done["a100-idle-1"].reason
    assert _labels(apiserver) == before
    # A config of the plan's name that says something else is never overwritten, and stops the node.
    name = plan_cluster(store.snapshot(force=True)).strategies[0].nodes[1].config
    assert name is not None
    clashing = OPERATOR_CONFIG + f"  {name}:\n    - devices: all\n      mig-enabled: false\n"
    apiserver.put("ConfigMap", {"metadata": {"name": "default-mig-parted-config", "namespace": "gpu-operator"},
                                "data": {"config.yaml": clashing}})
    done = {d.node: d for d in _applier(_store_from(apiserver), api_client).run_pass()}
    assert done["a100-idle-1"].outcome == "skipped" and "not overwritten" in done["a100-idle-1"].reason
    assert _labels(apiserver)["a100-idle-1"] == before["a100-idle-1"]
    assert _mig_configs(apiserver)[name] == [{"devices": "all", "mig-enabled": False}]


def test_the_configmap_is_the_one_the_configuration_names(apiserver: FakeApiServer, api_client: Any) -> None:
    store = _load(apiserver, config_map=False)
    apiserver.put("ConfigMap", {"metadata": {"name": "kgwe-mig", "namespace": "nvidia"},
                                "data": {"mig.yaml": "version: v1\nmig-configs: {}\n"}})
    manager = MigManager(configMap="kgwe-mig", namespace="nvidia", key="mig.yaml")
    done = MigApplier(store, KubeJson(api_client), lambda: True, clock=lambda: 1_800_000_000.0,
                      manager=manager).run_pass()
    labelled = {d.node for d in done if d.outcome == "labelled"}
    written = yaml.safe_load(apiserver.objects("ConfigMap")["nvidia/kgwe-mig"]["data"]["mig.yaml"])["mig-configs"]
    assert labelled == {"a100-idle-1", "h100-single"} and {_labels(apiserver)[n] for n in labelled} == set(written)


class _DeletedBeforeTheWrite:
    """The API, with the MIG manager's ConfigMap deleted between KGWE's first read and its write."""

    def __init__(self, api: KubeJson, apiserver: FakeApiServer) -> None:
        self.api, self.apiserver, self.deleted = api, apiserver, False

    def request(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        if method == "PUT" and not self.deleted:
            self.deleted = True
            self.apiserver.delete("ConfigMap", "gpu-operator/default-mig-parted-config")
        return self.api.request(method, path, **kwargs)


def test_a_configmap_deleted_meanwhile_is_read_again_and_stops_the_node(
    apiserver: FakeApiServer, api_client: Any
) -> None:
    store = _load(apiserver)
    before = _labels(apiserver)
    deleting = _DeletedBeforeTheWrite(KubeJson(api_client), apiserver)
    done = MigApplier(store, deleting, lambda: True, clock=lambda: 1_800_000_000.0).run_pass()
    # The replace answered 404: a lost race like a 409, read again, and a ConfigMap that is gone is never created.
    assert deleting.deleted and not [d for d in done if d.outcome == "labelled"]
    assert all("does not exist" in d.reason for d in done)
    assert _labels(apiserver) == before and "gpu-operator/default-mig-parted-config" not in apiserver.objects(
        "ConfigMap")
    assert not [r for r in apiserver.requests if r.method == "POST"]
