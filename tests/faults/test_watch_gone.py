"""The API watch drops mid-event and the resume point is compacted away (410 Gone): the source relists, and
admission decides on the cluster as it is now; no update made during the outage is lost."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fault_support import Webhook, gpu_pod
from kube_fake_apiserver import FakeApiServer
from kubernetes import client as k8s_client
from patience import WAIT_SECONDS
from waiting import eventually

from policies.vocabulary.accelerator_types import AcceleratorTable
from webhook.assembly import build_runtime
from webhook.cluster.kube_source import KubeClusterSource
from webhook.cluster.model import ClusterStore, object_key
from webhook.cluster.slimming import slim_object
from webhook.config import Config


def gpu_node(name: str, product: str, gpus: int = 8) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {"nvidia.com/gpu.product": product, "nvidia.com/gpu.count": str(gpus)}},
        "spec": {"taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]},
        "status": {"allocatable": {"cpu": "96", "memory": "1000Gi", "pods": "110", "nvidia.com/gpu": str(gpus)}},
    }


@pytest.fixture
def apiserver() -> Iterator[FakeApiServer]:
    server = FakeApiServer().start()
    yield server
    server.close()


@pytest.fixture
def store(apiserver: FakeApiServer) -> Iterator[ClusterStore]:
    store = ClusterStore(AcceleratorTable.build(), min_rebuild_interval=0.0)
    configuration = k8s_client.Configuration()
    configuration.host = apiserver.url
    with k8s_client.ApiClient(configuration) as api:
        source = KubeClusterSource(store, api, kinds=["Node", "Namespace"], watch_timeout_seconds=30,
                                   backoff_base=0.01, backoff_cap=0.05)
        apiserver.put("Namespace", {"metadata": {"name": "team-a"}})
        apiserver.put("Node", gpu_node("h100-a", "NVIDIA-H100-80GB-HBM3"))
        source.start()
        try:
            assert source.wait_loaded(WAIT_SECONDS)
            yield store
        finally:
            source.stop()


@pytest.mark.parametrize("as_http_status", [False, True], ids=["gone-as-error-event", "gone-as-http-410"])
def test_admission_sees_every_change_made_while_the_watch_was_gone(
    apiserver: FakeApiServer, store: ClusterStore, as_http_status: bool
) -> None:
    webhook = Webhook(build_runtime(Config(), None, store=store, load_policies=False))
    l4_pod, h100_pod = gpu_pod("infer", "nvidia-l4-24gb"), gpu_pod("train", "nvidia-h100-80gb")
    assert webhook.ask("validate", webhook.mutated(h100_pod)[1])["allowed"]
    refused = webhook.ask("validate", l4_pod)
    assert not refused["allowed"] and "nvidia-l4-24gb" in refused["status"]["message"]

    apiserver.expired_as_http_status = as_http_status
    eventually(lambda: apiserver.open_watches("Node") == 1, what="an open Node watch")
    with apiserver.cond:
        apiserver.drop_watches()
        apiserver.put("Node", gpu_node("l4-a", "NVIDIA-L4", gpus=4))
        apiserver.delete("Node", "h100-a")
        # Compaction: the deletion is no longer in the history, only a relist can reveal it.
        apiserver.forget_history("Node")

    def store_equals_server() -> bool:
        stored = {object_key(o): o for o in store.objects("Node")}
        return stored == {k: slim_object(v) for k, v in apiserver.objects("Node").items()}

    eventually(store_equals_server, what="the store equal to the API server after the relist")
    assert len(apiserver.requests_to("Node", watch=False)) >= 2  # relisted, not resumed

    _response, placed = webhook.mutated(l4_pod)
    assert placed["spec"]["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-L4"}
    assert webhook.ask("validate", placed)["allowed"]
    gone = webhook.ask("validate", h100_pod)
    assert not gone["allowed"] and "nvidia-h100-80gb" in gone["status"]["message"]
