"""KubeClusterSource against a local fake API server: list, watch, resume, 410 relist, backoff, missing CRDs."""

from __future__ import annotations

import gc
import os
import random
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kube_fake_apiserver import KGWE, FakeApiServer
from kubernetes import client as k8s_client
from patience import WAIT_SECONDS
from waiting import eventually

from policies.vocabulary.accelerator_types import AcceleratorTable
from policies.vocabulary.backoff import Backoff
from webhook.cluster.kube_json import TEST_KUBECONFIG_ENV, KubeJson, load_kube_client
from webhook.cluster.kube_source import KubeClusterSource
from webhook.cluster.model import ClusterStore, object_key
from webhook.cluster.slimming import slim_object, slim_pod


def node(name: str, product: str = "NVIDIA-H100-80GB-HBM3", gpus: int = 8) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {"nvidia.com/gpu.product": product, "nvidia.com/gpu.count": str(gpus)}},
        "status": {"allocatable": {"cpu": "96", "nvidia.com/gpu": str(gpus)}},
    }


def pod(name: str, namespace: str = "team-a", node_name: str | None = "h100-a", gpus: int = 1) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "schedulerName": "default-scheduler",
        "containers": [{
            "name": "main", "image": "nvcr.io/nvidia/pytorch:24.05-py3", "env": [{"name": "A", "value": "1"}],
            "resources": {"limits": {"nvidia.com/gpu": str(gpus)}},
        }],
        "initContainers": [{"name": "proxy", "image": "envoy", "restartPolicy": "Always", "resources": {}}],
        "volumes": [{"name": "data", "emptyDir": {}}],
    }
    if node_name:
        spec["nodeName"] = node_name
    return {
        "metadata": {"name": name, "namespace": namespace, "annotations": {"kgwe.io/tenant": namespace},
                     "managedFields": [{"manager": "kubectl"}]},
        "spec": spec,
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
    }


def seed(server: FakeApiServer) -> None:
    for name in ("h100-a", "h100-b", "l4-a"):
        server.put("Node", node(name, "NVIDIA-L4" if name.startswith("l4") else "NVIDIA-H100-80GB-HBM3"))
    for namespace in ("team-a", "kube-system"):
        server.put("Namespace", {"metadata": {"name": namespace}})
    for name in ("p0", "p1", "p2", "p3", "p4"):
        server.put("Pod", pod(name))
    server.put("Pod", pod("dns", namespace="kube-system", gpus=0))
    server.put("Role", {"metadata": {"name": "gpu-user", "namespace": "team-a"}, "rules": []})
    server.put("ClusterRole", {"metadata": {"name": "kgwe-profile-user"}, "rules": [
        {"apiGroups": ["kgwe.io"], "resources": ["hardwareprofiles"], "verbs": ["use"]}]})
    server.put("RoleBinding", {"metadata": {"name": "rb", "namespace": "team-a"}, "subjects": [],
                               "roleRef": {"kind": "Role", "name": "gpu-user"}})
    server.put("ClusterRoleBinding", {"metadata": {"name": "crb"}, "subjects": [],
                                      "roleRef": {"kind": "ClusterRole", "name": "kgwe-profile-user"}})
    server.put("HardwareProfile", {"metadata": {"name": "premium-h100"},
                                   "spec": {"acceleratorTypes": ["nvidia-h100-80gb"], "pricePerGPUHour": "4.50"}})
    server.put("TenantQuota", {"metadata": {"name": "team-a"}, "spec": {"tenant": "team-a", "limits": []}})
    server.put("GPUPolicy", {"metadata": {"name": "no-gb200"}, "spec": {"enforcementAction": "Deny"}})


def expected(server: FakeApiServer, kind: str) -> dict[str, dict[str, Any]]:
    objects = server.objects(kind)
    return {k: slim_pod(v) if kind == "Pod" else slim_object(v) for k, v in objects.items()}


def stored(store: ClusterStore, kind: str) -> dict[str, dict[str, Any]]:
    return {object_key(o): o for o in store.objects(kind)}


@pytest.fixture
def make_source(store: ClusterStore, api_client: k8s_client.ApiClient) -> Iterator[Callable[..., KubeClusterSource]]:
    sources: list[KubeClusterSource] = []

    def make(**kwargs: Any) -> KubeClusterSource:
        options: dict[str, Any] = {"watch_timeout_seconds": 30, "backoff_base": 0.01, "backoff_cap": 0.05}
        options.update(kwargs)
        source = KubeClusterSource(store, api_client, **options)
        sources.append(source)
        source.start()
        return source

    yield make
    for source in sources:
        source.stop()


ALL_KINDS = ("Node", "Pod", "Namespace", "Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding",
             "HardwareProfile", "TenantQuota", "GPUPolicy")


def test_initial_list_loads_every_kind_in_api_shape(apiserver, store, make_source):
    seed(apiserver)
    frozen = gc.get_freeze_count()
    source = make_source(list_page_size=2)
    assert source.wait_loaded(WAIT_SECONDS)
    assert store.loaded
    # What was listed left the cyclic collector's view (collector_pause.freeze_what_was_loaded): at 150,000 pods
    # a full collection held the GIL for seconds.
    assert gc.get_freeze_count() > frozen
    for kind in ALL_KINDS:
        assert stored(store, kind) == expected(apiserver, kind), kind
    # Pages of two: five team-a pods and one kube-system pod took three list requests.
    assert len(apiserver.requests_to("Pod", watch=False)) == 3
    node_obj = stored(store, "Node")["h100-a"]
    assert (node_obj["kind"], node_obj["apiVersion"]) == ("Node", "v1")
    assert stored(store, "ClusterRole")["kgwe-profile-user"]["apiVersion"] == "rbac.authorization.k8s.io/v1"
    assert store.snapshot(force=True).nodes["h100-a"].accelerator_type == "nvidia-h100-80gb"


def test_expired_continue_token_restarts_the_list(apiserver, store, make_source):
    seed(apiserver)
    apiserver.expire_next_continue = True
    source = make_source(kinds=["Pod"], list_page_size=2)
    assert source.wait_loaded(WAIT_SECONDS)
    assert stored(store, "Pod") == expected(apiserver, "Pod")
    # First page, expired continue, then the three pages of a fresh list.
    assert [r.query.get("continue", "") != "" for r in apiserver.requests_to("Pod", watch=False)] == [
        False, True, False, True, True]
    assert source.status["Pod"].errors == 0


def test_pods_are_slimmed_to_what_kgwe_reads(apiserver, store, make_source):
    apiserver.put("Pod", pod("p0"))
    assert make_source(kinds=["Pod"]).wait_loaded(WAIT_SECONDS)
    kept = stored(store, "Pod")["team-a/p0"]
    assert kept["spec"]["containers"] == [{"name": "main", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]
    # A sidecar init container keeps its restartPolicy: it changes the pod's effective GPU request.
    assert kept["spec"]["initContainers"] == [{"name": "proxy", "resources": {}, "restartPolicy": "Always"}]
    assert kept["spec"]["nodeName"] == "h100-a"
    assert kept["status"] == {"phase": "Running"}
    assert "managedFields" not in kept["metadata"]
    assert "volumes" not in kept["spec"]
    assert kept["metadata"]["annotations"] == {"kgwe.io/tenant": "team-a"}


def test_nodes_lose_only_managed_fields_and_image_lists(apiserver, store, make_source):
    big = node("h100-a")
    big["metadata"]["managedFields"] = [{"manager": "kubelet", "operation": "Update"}]
    big["status"]["images"] = [{"names": [f"registry/image-{i}:latest"], "sizeBytes": 1 << 30} for i in range(50)]
    big["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
    apiserver.put("Node", big)
    assert make_source(kinds=["Node"]).wait_loaded(WAIT_SECONDS)
    kept = stored(store, "Node")["h100-a"]
    assert "managedFields" not in kept["metadata"] and "images" not in kept["status"]
    assert kept["status"]["conditions"] == [{"type": "Ready", "status": "True"}]
    assert kept["metadata"]["labels"] == big["metadata"]["labels"]
    assert kept["status"]["allocatable"] == big["status"]["allocatable"]


def test_watch_events_update_the_store(apiserver, store, make_source):
    seed(apiserver)
    source = make_source()
    assert source.wait_loaded(WAIT_SECONDS)
    eventually(lambda: apiserver.open_watches("Node") == 1 and apiserver.open_watches("Pod") == 1)

    apiserver.put("Node", node("h200-a", "NVIDIA-H200", 8))
    changed = apiserver.objects("Node")["l4-a"]
    changed["metadata"]["labels"]["kgwe.io/nvlink-domain-size"] = "1"
    apiserver.put("Node", changed)
    apiserver.delete("Node", "h100-b")
    apiserver.put("Pod", pod("new", node_name=None))
    apiserver.delete("Pod", "team-a/p0")

    eventually(lambda: stored(store, "Node") == expected(apiserver, "Node")
               and stored(store, "Pod") == expected(apiserver, "Pod"))
    model = store.snapshot(force=True)
    assert set(model.nodes) == {"h100-a", "l4-a", "h200-a"}
    assert model.nodes["h200-a"].accelerator_type == "nvidia-h200-141gb"
    assert source.status["Node"].lists == 1


def test_dropped_stream_resumes_from_last_resource_version_without_losing_updates(apiserver, store, make_source):
    seed(apiserver)
    source = make_source()
    assert source.wait_loaded(WAIT_SECONDS)
    eventually(lambda: apiserver.open_watches("Node") == 1)
    seen = apiserver.put("Node", node("h100-c"))
    eventually(lambda: "h100-c" in stored(store, "Node"))

    # Break the stream mid-line and change things while the client is away.
    with apiserver.cond:
        apiserver.drop_watches()
        apiserver.delete("Node", "h100-a")
        relabelled = apiserver.objects("Node")["h100-b"]
        relabelled["metadata"]["labels"]["team"] = "a"
        apiserver.put("Node", relabelled)

    eventually(lambda: stored(store, "Node") == expected(apiserver, "Node"))
    watches = apiserver.requests_to("Node", watch=True)
    assert len(watches) >= 2
    assert watches[1].query["resourceVersion"] == seen["metadata"]["resourceVersion"]
    assert watches[1].query["allowWatchBookmarks"] == "true"
    # Resumed, not relisted.
    assert len(apiserver.requests_to("Node", watch=False)) == 1
    assert source.status["Node"].errors >= 1


def test_bookmark_moves_the_resume_point(apiserver, store, make_source):
    seed(apiserver)
    source = make_source(kinds=["Node"])
    assert source.wait_loaded(WAIT_SECONDS)
    eventually(lambda: apiserver.open_watches("Node") == 1)
    version = apiserver.bookmark("Node")
    eventually(lambda: source.status["Node"].resource_version == str(version))
    apiserver.drop_watches()
    eventually(lambda: len(apiserver.requests_to("Node", watch=True)) >= 2)
    assert apiserver.requests_to("Node", watch=True)[1].query["resourceVersion"] == str(version)


@pytest.mark.parametrize("as_http_status", [False, True], ids=["error-event", "http-410"])
def test_gone_relists_and_the_store_equals_the_server(apiserver, store, make_source, as_http_status):
    seed(apiserver)
    apiserver.expired_as_http_status = as_http_status
    source = make_source()
    assert source.wait_loaded(WAIT_SECONDS)
    eventually(lambda: apiserver.open_watches("Pod") == 1)

    with apiserver.cond:
        apiserver.drop_watches()
        apiserver.delete("Pod", "team-a/p1")
        moved = apiserver.objects("Pod")["team-a/p2"]
        moved["metadata"]["annotations"]["kgwe.io/hourly-cost"] = "4.5"
        apiserver.put("Pod", moved)
        apiserver.put("Pod", pod("p9"))
        # The deletion above is no longer in the server's history: only a relist can reveal it.
        apiserver.forget_history("Pod")

    eventually(lambda: len(apiserver.requests_to("Pod", watch=False)) == 2)
    eventually(lambda: stored(store, "Pod") == expected(apiserver, "Pod"))
    assert "team-a/p1" not in stored(store, "Pod")
    assert stored(store, "Pod")["team-a/p2"]["metadata"]["annotations"]["kgwe.io/hourly-cost"] == "4.5"
    assert source.status["Pod"].lists == 2
    # Other kinds kept their streams.
    assert len(apiserver.requests_to("Node", watch=False)) == 1


def test_server_errors_back_off_and_recover(apiserver, store, make_source):
    seed(apiserver)
    apiserver.fail_next("Node", 500, times=3)
    source = make_source(kinds=["Node", "Namespace"])
    assert source.wait_loaded(WAIT_SECONDS)
    assert len(apiserver.requests_to("Node", watch=False)) == 4
    assert source.status["Node"].errors == 3
    assert "500" in source.status["Node"].last_error
    assert stored(store, "Node") == expected(apiserver, "Node")

    # A failing watch is retried from the same resourceVersion after backing off.
    eventually(lambda: apiserver.open_watches("Node") == 1)
    with apiserver.cond:
        apiserver.fail_next("Node", 500, times=2)
        apiserver.drop_watches()
        apiserver.put("Node", node("h100-z"))
    eventually(lambda: "h100-z" in stored(store, "Node"))
    assert source.status["Node"].errors >= 5
    assert len(apiserver.requests_to("Node", watch=False)) == 4


def test_backoff_grows_exponentially_with_jitter_and_resets():
    backoff = Backoff(base=0.5, cap=8.0, rng=random.Random(7))
    delays = [backoff.next_delay() for _ in range(7)]
    ceilings = [0.5, 1.0, 2.0, 4.0, 8.0, 8.0, 8.0]
    for delay, ceiling in zip(delays, ceilings, strict=True):
        assert ceiling / 2 <= delay <= ceiling
    assert len(set(delays)) == len(delays)
    backoff.reset()
    assert backoff.next_delay() <= 0.5


def test_missing_crd_counts_as_empty_and_is_retried(apiserver, store, make_source):
    seed(apiserver)
    apiserver.missing.add(f"{KGWE}/gpupolicies")
    source = make_source(missing_crd_retry_seconds=0.05)
    assert source.wait_loaded(WAIT_SECONDS)
    assert source.status["GPUPolicy"].crd_missing
    assert stored(store, "GPUPolicy") == {}
    assert stored(store, "HardwareProfile") == expected(apiserver, "HardwareProfile")

    apiserver.missing.discard(f"{KGWE}/gpupolicies")
    eventually(lambda: stored(store, "GPUPolicy") == expected(apiserver, "GPUPolicy"))
    assert not source.status["GPUPolicy"].crd_missing


def test_namespace_filter_keeps_only_chosen_namespaces(apiserver, store, make_source):
    seed(apiserver)
    source = make_source(namespace_filter=lambda ns: ns != "kube-system")
    assert source.wait_loaded(WAIT_SECONDS)
    assert "kube-system/dns" not in stored(store, "Pod")
    assert len(stored(store, "Pod")) == 5
    apiserver.put("Pod", pod("dns2", namespace="kube-system"))
    apiserver.put("Pod", pod("p5"))
    eventually(lambda: "team-a/p5" in stored(store, "Pod"))
    assert "kube-system/dns2" not in stored(store, "Pod")
    # Cluster-scoped kinds are not filtered.
    assert "kube-system" in stored(store, "Namespace")


def test_stop_ends_open_watches(apiserver, store, api_client):
    seed(apiserver)
    source = KubeClusterSource(store, api_client, kinds=["Node", "Pod"], watch_timeout_seconds=60)
    source.start()
    assert source.wait_loaded(WAIT_SECONDS)
    eventually(lambda: apiserver.open_watches("Node") == 1)
    source.stop()
    assert not any(t.state().running for t in source.tasks)
    eventually(lambda: apiserver.open_watches("Node") == 0)


@pytest.mark.skipif(not os.environ.get(TEST_KUBECONFIG_ENV), reason=f"set {TEST_KUBECONFIG_ENV} to a kubeconfig")
def test_real_api_server_lists_and_watches_nodes_and_namespaces():
    api_client = load_kube_client(None)
    api = KubeJson(api_client)
    store = ClusterStore(AcceleratorTable.build(), min_rebuild_interval=0.0)
    source = KubeClusterSource(store, api_client, kinds=["Node", "Namespace"], watch_timeout_seconds=30)
    source.start()
    name = f"kgwe-watch-test-{int(time.time())}"
    created = False
    try:
        assert source.wait_loaded(30)
        listed = {n["metadata"]["name"] for n in api.request("GET", "/api/v1/nodes")["items"]}
        assert set(stored(store, "Node")) == listed
        assert "default" in stored(store, "Namespace")
        api.request("POST", "/api/v1/namespaces", body={
            "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": {"kgwe.io/test": "watch"}},
        })
        created = True
        eventually(lambda: name in stored(store, "Namespace"))
        assert stored(store, "Namespace")[name]["metadata"]["labels"]["kgwe.io/test"] == "watch"
    finally:
        source.stop()
        if created:
            api.request("DELETE", f"/api/v1/namespaces/{name}")


def test_kubeconfig_file_and_test_variable_reach_the_server(apiserver, store, tmp_path, monkeypatch):
    seed(apiserver)
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(f"""
apiVersion: v1
kind: Config
clusters: [{{name: fake, cluster: {{server: "{apiserver.url}"}}}}]
users: [{{name: tester, user: {{token: secret-token}}}}]
contexts: [{{name: fake, context: {{cluster: fake, user: tester}}}}]
current-context: fake
""")
    from_file = load_kube_client(str(kubeconfig))
    assert KubeJson(from_file).request("GET", "/api/v1/namespaces")["items"]
    monkeypatch.setenv(TEST_KUBECONFIG_ENV, str(kubeconfig))
    from_env = load_kube_client(None)
    source = KubeClusterSource(store, from_env, kinds=["Namespace"])
    source.start()
    try:
        assert source.wait_loaded(WAIT_SECONDS)
        assert set(stored(store, "Namespace")) == {"team-a", "kube-system"}
        assert {r.authorization for r in apiserver.requests} == {"Bearer secret-token"}
    finally:
        source.stop()


def test_stopping_runs_each_watch_loop_to_its_end_once(apiserver, store, api_client):
    # The kinds share one stop flag: once any task is stopped every reflector loop returns, and a task whose own
    # stop had not come yet ran its loop again and again (a spinning CPU on every stop, 0.1-0.4 CPU-s here).
    seed(apiserver)
    source = KubeClusterSource(store, api_client, watch_timeout_seconds=30, backoff_base=0.01, backoff_cap=0.05)
    source.start()
    assert source.wait_loaded(WAIT_SECONDS)
    source.tasks[0].signal_stop()  # one task first, as a stop in progress is seen by the others
    time.sleep(0.2)
    source.stop()
    runs = {task.name: task.state().runs for task in source.tasks}
    assert all(n <= 1 for n in runs.values()), runs
    assert not any(task.state().running for task in source.tasks)


def test_the_first_list_does_not_wait_the_restart_pause(apiserver, store, api_client, monkeypatch):
    # The pause is for a reflector loop that returned; the first run is at start, so readiness never waits it.
    import webhook.cluster.kube_source as kube_source

    monkeypatch.setattr(kube_source, "WATCH_RESTART_SECONDS", 3600.0)
    seed(apiserver)
    source = KubeClusterSource(store, api_client, kinds=["Node", "Pod"], watch_timeout_seconds=30)
    source.start()
    try:
        assert source.wait_loaded(WAIT_SECONDS)
        assert set(stored(store, "Node")) == set(apiserver.objects("Node"))
    finally:
        source.stop()
    assert not any(task.state().running for task in source.tasks)
