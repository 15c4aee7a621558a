"""Attacks on the quota gate and its controller (SPEC section 10): a pod creator must not run more GPUs of a
type than the tenant's TenantQuota allows, start a GPU pod past the controller, hold another tenant's quota,
or stall the controller for every tenant (red-team pass on quotas released by KGWE).

The example cluster: team-a may use 8 H100s and 2 A100s, `train-llm-0` runs on 4 H100s.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from kube_fake_apiserver import FakeApiServer, serving_cluster
from kubernetes import client as k8s_client
from patience import WAIT_SECONDS

from webhook.assembly import build_runtime
from webhook.cluster.kube_source import KubeClusterSource
from webhook.cluster.model import ClusterStore
from webhook.config import Config, load_config
from webhook.quotas.controller import QuotaController
from webhook.quotas.waiters import quota_picture
from webhook.quotas.writer import kube_quota_writer
from webhook.review import review_pod

ROOT = Path(__file__).resolve().parents[2]
GATE = "kgwe.io/quota"
H100 = "nvidia-h100-80gb"
A100 = "nvidia-a100-80gb"


@pytest.fixture(scope="module")
def config() -> Config:
    return load_config(ROOT / "examples" / "config.yaml")


def gpu_pod(name: str, gpus: int | str = 1, annotations: dict[str, str] | None = None,
            namespace: str = "team-a", **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "annotations": dict(annotations or {})},
            "spec": {"containers": [{"name": "main", "image": "cuda",
                                     "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}], **spec}}


def admitted(config: Config, pod: dict[str, Any], created: str = "2026-11-29T00:00:00Z") -> dict[str, Any]:
    """The pod as the API server stores it after KGWE's /mutate and /validate admitted it."""
    runtime = build_runtime(config, ROOT / "examples" / "cluster", load_policies=False)
    result = review_pod(runtime.admission, pod, "alice")
    assert result.allowed, result.message
    stored = copy.deepcopy(result.object)
    stored["metadata"]["creationTimestamp"] = created
    stored["metadata"]["uid"] = f"uid-{stored['metadata']['name']}"
    stored.setdefault("status", {"phase": "Pending"})
    return stored


def gates(pod: dict[str, Any]) -> list[str]:
    return [g["name"] for g in pod["spec"].get("schedulingGates") or []]


class Recorder:
    """A QuotaWriter that keeps the patches it was asked to apply."""

    def __init__(self) -> None:
        self.released: dict[str, dict[str, Any]] = {}

    def release(self, pod: dict[str, Any], patch: dict[str, Any]) -> None:
        self.released[pod["metadata"]["name"]] = patch

    def waiting(self, pod: dict[str, Any], message: str, *, event: bool = True) -> None:
        pass

    def status(self, quota: str, status: dict[str, Any]) -> None:
        pass


def directory_store(config: Config) -> ClusterStore:
    return build_runtime(config, ROOT / "examples" / "cluster", load_policies=False).store


@pytest.fixture
def api() -> Iterator[tuple[FakeApiServer, QuotaController]]:
    """The fake API server with the example cluster, and one quota controller (the leader) watching it."""
    config = load_config(ROOT / "examples" / "config.yaml")
    server = serving_cluster(ROOT / "examples" / "cluster")
    configuration = k8s_client.Configuration()
    configuration.host = server.url
    client = k8s_client.ApiClient(configuration)
    store = ClusterStore(config.accelerator_table(), min_rebuild_interval=0.0)
    source = KubeClusterSource(store, client)
    source.start()
    assert source.wait_loaded(WAIT_SECONDS)
    controller = QuotaController(store, config, kube_quota_writer(client))
    yield server, controller
    source.stop()
    client.close()
    server.close()


def settle(server: FakeApiServer, controller: QuotaController, names: list[str]) -> None:
    """Wait until the controller's store has seen the pods `names` of team-a."""
    import time

    deadline = time.monotonic() + WAIT_SECONDS
    while time.monotonic() < deadline:
        model = controller.store.snapshot(force=True)
        if all(f"team-a/{n}" in model.pods for n in names):
            return
        time.sleep(0.02)
    raise AssertionError(f"the store never saw {names}")


# -- (d) one crafted pod stalls the controller of every tenant -------------------------------------------


def test_a_pin_the_api_server_refuses_does_not_stop_the_pass_for_everyone_else(
    api: tuple[FakeApiServer, QuotaController], config: Config
) -> None:
    # A plain GPU pod (no KGWE intent: admitted with a warning, whatever its own nodeSelector says) whose
    # nodeSelector names an H100 product on a host that does not exist: no node of any type can run it, so it
    # may be charged any type, and the queue picks A100 (first in its order). The pin then *changed* its
    # nodeSelector's `nvidia.com/gpu.product` from H100 to A100, which Kubernetes refuses on a gated pod (only
    # additions): a 422 that made the whole pass raise, before any later pod (or tenant) was released, on every
    # retry, for as long as that pod exists.
    server, controller = api
    blocker = admitted(config, gpu_pod("blocker", nodeSelector={
        "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "kubernetes.io/hostname": "no-such-node"}),
        "2026-11-29T00:00:00Z")
    honest = admitted(config, gpu_pod("honest", annotations={"kgwe.io/accelerator": H100}), "2026-11-29T00:00:01Z")
    assert gates(blocker) == [GATE] and gates(honest) == [GATE]
    server.put("Pod", blocker)
    server.put("Pod", honest)
    settle(server, controller, ["blocker", "honest"])
    controller.reconcile_once()  # must not raise
    pods = server.objects("Pod")
    assert GATE not in gates(pods["team-a/honest"]), "the honest pod behind the crafted one was never released"
    # The crafted pod is pinned without any of its own selector changed (it can never run, and is charged A100).
    blocked = pods["team-a/blocker"]
    if GATE not in gates(blocked):
        assert blocked["spec"]["nodeSelector"]["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"


def test_an_out_of_range_quantity_on_a_pod_kgwe_never_admitted_does_not_crash_the_pass(config: Config) -> None:
    # A pod in an excluded namespace (kube-system: no webhook sees it) with `kgwe.io/gpu-memory: 9e999999999`:
    # the quantity parser raised decimal.Overflow (an ArithmeticError, not the ValueError every caller
    # catches), so every quota pass raised and no tenant's pod was ever released again.
    store = directory_store(config)
    store.upsert({"apiVersion": "v1", "kind": "Pod",
                  "metadata": {"name": "odd", "namespace": "kube-system", "uid": "uid-odd",
                               "annotations": {"kgwe.io/accelerator-type": H100,
                                               "kgwe.io/gpu-memory": "9e999999999"}},
                  "spec": {"containers": [{"name": "m", "image": "x",
                                           "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
                  "status": {"phase": "Pending"}})
    store.upsert(admitted(config, gpu_pod("honest", annotations={"kgwe.io/accelerator": H100})))
    writer = Recorder()
    QuotaController(store, config, writer).reconcile_once()
    assert "honest" in writer.released


@pytest.mark.parametrize("value", ["9e999999999", "1e999999999Ki", "-9e999999999"])
def test_the_quantity_parser_answers_value_error_for_out_of_range_exponents(value: str) -> None:
    from policies.vocabulary.quantities import parse_quantity

    with pytest.raises(ValueError):
        parse_quantity(value)


def test_an_out_of_range_gpu_memory_annotation_is_refused_not_an_internal_error(config: Config) -> None:
    runtime = build_runtime(config, ROOT / "examples" / "cluster", load_policies=False)
    result = review_pod(runtime.admission, gpu_pod("odd", annotations={"kgwe.io/gpu-memory": "9e999999999"}), "alice")
    assert not result.allowed
    assert "9e999999999" in (result.message or "")


# -- (a) a pod released on one type that can still run on another ------------------------------------------


def test_a_pod_narrowed_by_cordoned_nodes_is_still_pinned_to_the_type_it_is_charged(config: Config) -> None:
    # A pod that may run on H100 or A100 while every H100 node is cordoned: the queue counts only the types it
    # can run on now (A100) and charged it A100, but did not pin it (one type left after narrowing). Once the
    # H100s are uncordoned the scheduler may bind it there: an H100 pod the H100 limit never counted when it
    # was released, so team-a runs more H100s than its TenantQuota allows.
    store = directory_store(config)
    for node in store.objects("Node"):
        if node["metadata"]["labels"].get("nvidia.com/gpu.product", "").startswith("NVIDIA-H100"):
            cordoned = copy.deepcopy(node)
            cordoned.setdefault("spec", {})["unschedulable"] = True
            store.upsert(cordoned)
    pod = admitted(config, gpu_pod("either", annotations={"kgwe.io/accelerator": f"{H100},{A100}"}))
    store.upsert(pod)
    writer = Recorder()
    QuotaController(store, config, writer).reconcile_once()
    patch = writer.released["either"]
    assert patch["metadata"]["annotations"]["kgwe.io/accelerator-type"] == A100
    pinned = copy.deepcopy(pod)
    for key in ("nodeSelector", "affinity"):
        if key in patch["spec"]:
            pinned["spec"][key] = patch["spec"][key]
    # No H100 node may run the pod as released.
    from webhook.scheduling.predicates import first_feasible

    model = store.snapshot(force=True)
    h100_nodes = [copy.deepcopy(model.nodes[n]) for n in model.types[H100].nodes]
    for node in h100_nodes:
        node.unschedulable = False
    spec = {k: pinned["spec"][k] for k in ("nodeSelector", "affinity", "tolerations") if k in pinned["spec"]}
    assert first_feasible({"spec": spec}, h100_nodes) is None, "released on A100's quota, free to run on an H100"


# -- (c) another tenant's quota held by a pod KGWE never admitted ------------------------------------------


def test_a_pod_kgwe_never_admitted_cannot_fill_another_tenants_quota(config: Config) -> None:
    store = directory_store(config)
    store.upsert({"apiVersion": "v1", "kind": "Pod",
                  "metadata": {"name": "squatter", "namespace": "kube-system", "uid": "uid-squatter",
                               "annotations": {"kgwe.io/accelerator-type": A100, "kgwe.io/tenant": "team-a"}},
                  "spec": {"containers": [{"name": "m", "image": "x",
                                           "resources": {"limits": {"nvidia.com/gpu": "2"}}}],
                           "nodeSelector": {"kubernetes.io/hostname": "no-such-node"}},
                  "status": {"phase": "Pending"}})
    picture = quota_picture(store.snapshot(force=True))
    a100 = [c for c in picture.tenants["team-a"].released if A100 in c.candidate_types or c.bound_type == A100]
    assert sum((c.gpu_equivalents for c in a100), Decimal(0)) == 0


def test_an_out_of_range_limit_in_a_tenant_quota_is_skipped() -> None:
    # `gpus: 9e999999999` parsed (the Kubernetes parser is unbounded), and any message naming the limit
    # (`format_gpus`) would have built an integer of a billion digits.
    from policies.quota.model import quota_limits

    quota = {"metadata": {"name": "q"}, "spec": {"limits": [
        {"acceleratorType": H100, "gpus": "9e999999999"}, {"acceleratorType": A100, "gpus": 2}]}}
    assert [limit.key.name for limit in quota_limits(quota)] == [A100]
