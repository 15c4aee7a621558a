"""The bound-pod controller on the example cluster: the patches it sends, the cost gauge, and no churn."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from kube_fake_apiserver import FakeApiServer
from patience import WAIT_SECONDS
from prometheus_client import CollectorRegistry
from waiting import eventually

from webhook.cluster.kube_source import KubeClusterSource
from webhook.cluster.model import ClusterStore
from webhook.cluster.yaml_source import YamlDirectorySource, iter_manifests
from webhook.config import Config, load_config
from webhook.controllers.bound_pods import BoundPodController, kube_pod_patcher
from webhook.controllers.runner import build_controllers

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
METRIC = "kgwe_pod_hourly_cost"


def bound_pod(
    name: str,
    node: str | None,
    resources: dict[str, str],
    annotations: dict[str, str],
    namespace: str = "team-a",
    phase: str = "Running",
) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "main", "resources": {"limits": resources}}]}
    if node:
        spec["nodeName"] = node
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}", "resourceVersion": "1",
                     "annotations": annotations},
        "spec": spec,
        "status": {"phase": phase},
    }


# Admitted for either type (priced at the dearer one), then bound to an H100 node.
TRAINER = bound_pod(
    "trainer", "dgx-h100-02", {"nvidia.com/gpu": "2"},
    {"kgwe.io/accelerator-type": "nvidia-h100-80gb,nvidia-h200-141gb", "kgwe.io/hourly-cost": "12",
     "kgwe.io/tenant": "team-a"},
)


class Recorder:
    """The controller's patch seam: records what would go to the API server."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, dict[str, Any]]] = []

    def __call__(self, namespace: str, name: str, body: dict[str, Any]) -> None:
        self.calls.append((namespace, name, body))


@pytest.fixture
def config() -> Config:
    return load_config(EXAMPLES / "config.yaml")


@pytest.fixture
def store(config: Config) -> ClusterStore:
    store = ClusterStore(config.accelerator_table(), min_rebuild_interval=0.0)
    YamlDirectorySource(EXAMPLES / "cluster", store).load()
    return store


@pytest.fixture
def registry() -> CollectorRegistry:
    return CollectorRegistry()


@pytest.fixture
def controller(store, config, registry) -> tuple[BoundPodController, Recorder]:
    recorder = Recorder()
    return BoundPodController(store, config, recorder, registry=registry), recorder


def gauge(registry: CollectorRegistry, namespace: str, tenant: str, accelerator_type: str) -> float | None:
    """The sum over the pods of these labels (the series are per pod), None when there is none."""
    wanted = {"namespace": namespace, "tenant": tenant, "accelerator_type": accelerator_type}
    values = [
        sample.value
        for family in registry.collect() if family.name == METRIC
        for sample in family.samples
        if all(sample.labels.get(k) == v for k, v in wanted.items())
    ]
    assert all("pod" in s.labels for f in registry.collect() if f.name == METRIC for s in f.samples)
    return sum(values) if values else None


def test_bound_pod_gets_its_node_type_and_that_types_cost(store, controller):
    ctl, recorder = controller
    store.upsert(TRAINER)
    applied = ctl.reconcile_once()
    trainer = [c for c in recorder.calls if c[1] == "trainer"]
    assert trainer == [("team-a", "trainer", {"metadata": {"annotations": {
        "kgwe.io/accelerator-type": "nvidia-h100-80gb", "kgwe.io/hourly-cost": "9"}}})]
    assert {p.name for p in applied} == {c[1] for c in recorder.calls}


def test_example_pods_already_correct_are_left_alone_and_missing_costs_filled(controller):
    ctl, recorder = controller
    ctl.reconcile_once()
    # train-llm-0 says "18.00" for 4 H100s at 4.50: equal to 18, so no patch. notebook-1 has no cost yet:
    # one 1g.10gb slice of an A100 80GB at 2.80 is 0.4. batch-done has finished.
    notebook_patch = {"metadata": {"annotations": {"kgwe.io/hourly-cost": "0.4"}}}
    assert recorder.calls == [("inference", "notebook-1", notebook_patch)]


def test_shared_and_profile_pods(store, controller):
    ctl, recorder = controller
    store.upsert(bound_pod("mps", "l4-mps-01", {"nvidia.com/gpu": "1"},
                           {"kgwe.io/accelerator-type": "nvidia-l4-24gb", "kgwe.io/gpu-fraction": "0.5"},
                           namespace="inference"))
    store.upsert(bound_pod("premium", "dgx-h100-01", {"nvidia.com/gpu": "1"},
                           {"kgwe.io/accelerator-type": "nvidia-h100-80gb", "kgwe.io/profile": "nvl72",
                            "kgwe.io/hourly-cost": "9"}))
    ctl.reconcile_once()
    by_name = {name: body["metadata"]["annotations"] for _ns, name, body in recorder.calls}
    assert by_name["mps"] == {"kgwe.io/hourly-cost": "0.4"}
    # The nvl72 profile lists only GB200: on an H100 node the pricing config's 4.50 applies.
    assert by_name["premium"] == {"kgwe.io/hourly-cost": "4.5"}


def test_cost_without_a_price_is_removed(store, config, registry):
    recorder = Recorder()
    cheap = config.model_copy(update={"pricing": config.pricing.model_copy(update={"per_gpu_hour": {}})})
    store.upsert(TRAINER)
    BoundPodController(store, cheap, recorder, registry=registry).reconcile_once()
    trainer = [body for _ns, name, body in recorder.calls if name == "trainer"]
    assert trainer == [{"metadata": {"annotations": {
        "kgwe.io/accelerator-type": "nvidia-h100-80gb", "kgwe.io/hourly-cost": None}}}]


def test_pods_not_to_touch(store, controller):
    ctl, recorder = controller
    store.upsert(bound_pod("pending", None, {"nvidia.com/gpu": "1"}, {}, phase="Pending"))
    store.upsert(bound_pod("cpu-only", "dgx-h100-01", {"cpu": "1"}, {}))
    store.upsert(bound_pod("system", "dgx-h100-01", {"nvidia.com/gpu": "1"}, {}, namespace="kube-system"))
    store.upsert(bound_pod("unknown-node", "gpu-unlabelled-01", {"nvidia.com/gpu": "1"}, {}))
    store.upsert(bound_pod("done", "dgx-h100-01", {"nvidia.com/gpu": "1"}, {}, phase="Failed"))
    ctl.reconcile_once()
    touched = {name for _ns, name, _body in recorder.calls}
    assert touched.isdisjoint({"pending", "cpu-only", "system", "unknown-node", "done"})


def test_a_patch_is_sent_once_per_pod_version(store, controller):
    ctl, recorder = controller
    store.upsert(TRAINER)
    ctl.reconcile_once()
    sent = len(recorder.calls)
    ctl.reconcile_once()
    assert len(recorder.calls) == sent
    # The watch brings the patched pod back: nothing left to do.
    patched = bound_pod("trainer", "dgx-h100-02", {"nvidia.com/gpu": "2"}, {
        "kgwe.io/accelerator-type": "nvidia-h100-80gb", "kgwe.io/hourly-cost": "9", "kgwe.io/tenant": "team-a"})
    patched["metadata"]["resourceVersion"] = "2"
    store.upsert(patched)
    assert ctl.reconcile_once() == []
    assert len(recorder.calls) == sent


def test_gauge_sums_pods_bound_to_nodes_and_prunes(store, controller, registry):
    ctl, _recorder = controller
    store.upsert(TRAINER)
    store.upsert(bound_pod("waiting", None, {"nvidia.com/gpu": "1"}, {
        "kgwe.io/accelerator-type": "nvidia-h100-80gb", "kgwe.io/hourly-cost": "4.5", "kgwe.io/tenant": "team-a"},
        phase="Pending"))
    ctl.reconcile_once()
    # train-llm-0 (18) + trainer as patched (9); `waiting` holds no GPU yet (a cost series is spend, and a pod
    # behind a gate spends nothing); batch-done has finished.
    assert gauge(registry, "team-a", "team-a", "nvidia-h100-80gb") == pytest.approx(27.0)
    assert gauge(registry, "inference", "inference", "nvidia-a100-80gb") == pytest.approx(0.4)

    for name in ("train-llm-0", "trainer", "waiting"):
        store.delete({"kind": "Pod", "metadata": {"name": name, "namespace": "team-a"}})
    ctl.reconcile_once()
    assert gauge(registry, "team-a", "team-a", "nvidia-h100-80gb") is None
    assert gauge(registry, "inference", "inference", "nvidia-a100-80gb") == pytest.approx(0.4)


class FailingOnce(Recorder):
    """An API server that refuses the first patch of each pod (a 500), then takes them."""

    def __call__(self, namespace: str, name: str, body: dict[str, Any]) -> None:
        from kubernetes.client.exceptions import ApiException

        if not any(n == name for _ns, n, _b in self.calls):
            self.calls.append((namespace, name, {"refused": True}))
            raise ApiException(status=500, reason="Internal Server Error")
        super().__call__(namespace, name, body)


def test_an_unchanged_cluster_is_not_walked_again_but_a_refused_patch_is_retried(store, config, registry):
    """Issue 36: a pass is a function of the snapshot and the configuration, so while neither changes the next
    pass does nothing (at 150,000 pods a pass is seconds of CPU); a patch the API server refused is sent again."""
    recorder = FailingOnce()
    ctl = BoundPodController(store, config, recorder, registry=registry)
    store.upsert(TRAINER)
    assert ctl.reconcile_once() == []  # refused
    applied = ctl.reconcile_once()  # the same snapshot, retried because a patch failed
    assert [p.name for p in applied if p.name == "trainer"] == ["trainer"]
    sent = len(recorder.calls)
    assert ctl.reconcile_once() == [] and len(recorder.calls) == sent
    assert gauge(registry, "team-a", "team-a", "nvidia-h100-80gb") == pytest.approx(27.0)
    # A change of the cluster is a new pass: the deleted pod's series goes.
    store.delete({"kind": "Pod", "metadata": {"name": "trainer", "namespace": "team-a"}})
    ctl.reconcile_once()
    assert gauge(registry, "team-a", "team-a", "nvidia-h100-80gb") == pytest.approx(18.0)


def test_a_follower_neither_patches_nor_exports(store, config, registry):
    recorder = Recorder()
    store.upsert(TRAINER)
    follower = BoundPodController(store, config, recorder, registry=registry, is_leader=lambda: False)
    assert follower.reconcile_once() == []
    assert recorder.calls == []
    assert gauge(registry, "team-a", "team-a", "nvidia-h100-80gb") is None




def test_against_an_api_server_patches_land_and_are_not_repeated(apiserver: FakeApiServer, api_client, config):
    for _path, obj in iter_manifests(EXAMPLES / "cluster"):
        if obj["kind"] in ("Node", "Pod", "Namespace", "HardwareProfile"):
            apiserver.put(obj["kind"], obj)
    apiserver.put("Pod", TRAINER)
    store = ClusterStore(config.accelerator_table(), min_rebuild_interval=0.0)
    source = KubeClusterSource(store, api_client, kinds=["Node", "Pod", "Namespace", "HardwareProfile"],
                               watch_timeout_seconds=30)
    source.start()
    try:
        assert source.wait_loaded(WAIT_SECONDS)
        ctl = BoundPodController(store, config, kube_pod_patcher(api_client), registry=CollectorRegistry())
        assert {p.name for p in ctl.reconcile_once()} == {"trainer", "notebook-1"}
        annotations = apiserver.objects("Pod")["team-a/trainer"]["metadata"]["annotations"]
        assert annotations["kgwe.io/accelerator-type"] == "nvidia-h100-80gb"
        assert annotations["kgwe.io/hourly-cost"] == "9"
        patches = [r for r in apiserver.requests if r.method == "PATCH"]
        assert {r.query.get("fieldManager") for r in patches} == {"kgwe-controller"}

        def synced() -> bool:
            pods = {p["metadata"]["name"]: p for p in store.objects("Pod")}
            return pods["trainer"]["metadata"]["annotations"].get("kgwe.io/hourly-cost") == "9"

        eventually(synced)
        eventually(lambda: "kgwe.io/hourly-cost" in next(
            p for p in store.objects("Pod") if p["metadata"]["name"] == "notebook-1")["metadata"]["annotations"])
        assert ctl.reconcile_once() == []
        assert len([r for r in apiserver.requests if r.method == "PATCH"]) == 2
    finally:
        source.stop()


def test_yaml_mode_exports_the_gauge_and_patches_nothing(store, config, registry):
    controllers = build_controllers(store, config, None, registry=registry, interval_seconds=0.01)
    controllers.start()
    try:
        assert controllers.elector.is_leader()
        eventually(lambda: gauge(registry, "team-a", "team-a", "nvidia-h100-80gb") is not None)
        assert gauge(registry, "team-a", "team-a", "nvidia-h100-80gb") == pytest.approx(18.0)
        assert controllers.bound_pods.reconcile_once() == []
    finally:
        controllers.stop()
    assert gauge(registry, "team-a", "team-a", "nvidia-h100-80gb") is None


def test_in_cluster_the_leader_patches_in_the_background(apiserver: FakeApiServer, api_client, config, registry):
    apiserver.put("Node", next(o for _p, o in iter_manifests(EXAMPLES / "cluster") if o["kind"] == "Node"
                               and o["metadata"]["name"] == "dgx-h100-02"))
    apiserver.put("Pod", TRAINER)
    store = ClusterStore(config.accelerator_table(), min_rebuild_interval=0.0)
    source = KubeClusterSource(store, api_client, kinds=["Node", "Pod"], watch_timeout_seconds=30)
    source.start()
    controllers = build_controllers(store, config, api_client, namespace="kgwe-system", registry=registry,
                                    interval_seconds=0.02)
    controllers.elector.retry_seconds = 0.02
    try:
        assert source.wait_loaded(WAIT_SECONDS)
        controllers.start()
        eventually(lambda: apiserver.objects("Pod")["team-a/trainer"]["metadata"]["annotations"].get(
            "kgwe.io/hourly-cost") == "9")
        assert apiserver.leases["kgwe-system/kgwe-controllers"]["spec"]["holderIdentity"] == (
            controllers.elector.identity)
        eventually(lambda: gauge(registry, "team-a", "team-a", "nvidia-h100-80gb") == pytest.approx(9.0))
    finally:
        controllers.stop()
        source.stop()
    assert apiserver.leases["kgwe-system/kgwe-controllers"]["spec"]["holderIdentity"] == ""
    assert len([r for r in apiserver.requests if r.method == "PATCH"]) == 1
