"""Device-plugin MIG: a small GPU asks for the smallest profile with a slice free now (the node's
allocatable minus its bound pods, as the cluster model reads them from the API), else the smallest."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import pytest
from kube_fake_apiserver import FakeApiServer
from kubernetes import client as k8s_client
from placement_support import Admit
from waiting import eventually

from policies.vocabulary.accelerator_types import AcceleratorTable
from webhook.assembly import build_runtime
from webhook.cluster.kube_source import KubeClusterSource
from webhook.cluster.model import ClusterStore
from webhook.config import Config

# One A100 in MIG mixed mode as a v1.36 API server serves it: 2x 1g.10gb, 1x 2g.20gb, 1x 3g.40gb.
SLICES = {"nvidia.com/mig-1g.10gb": "2", "nvidia.com/mig-2g.20gb": "1", "nvidia.com/mig-3g.40gb": "1"}
NODE = {
    "apiVersion": "v1", "kind": "Node",
    "metadata": {"name": "a100-mig", "labels": {
        "kubernetes.io/hostname": "a100-mig", "nvidia.com/gpu.present": "true",
        "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB", "nvidia.com/gpu.memory": "81920",
        "nvidia.com/gpu.count": "1", "nvidia.com/mig.strategy": "mixed", "nvidia.com/mig.config.state": "success"}},
    "spec": {},
    "status": {"capacity": {"cpu": "16", "memory": "64Gi", "pods": "110", "nvidia.com/gpu": "0", **SLICES},
               "allocatable": {"cpu": "16", "memory": "64Gi", "pods": "110", "nvidia.com/gpu": "0", **SLICES},
               "conditions": [{"type": "Ready", "status": "True"}]},
}
SMALL = {
    "apiVersion": "v1", "kind": "Pod",
    "metadata": {"name": "notebook", "namespace": "team-a",
                 "annotations": {"kgwe.io/sharing": "mig", "kgwe.io/gpu-memory": "10Gi"}},
    "spec": {"containers": [{"name": "c", "image": "cuda", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
}


def bound(name: str, resource: str, phase: str = "Running") -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "team-a"},
        "spec": {"nodeName": "a100-mig", "containers": [
            {"name": "c", "image": "cuda", "resources": {"limits": {resource: "1"}, "requests": {resource: "1"}}}]},
        "status": {"phase": phase},
    }


@pytest.fixture
def cluster() -> Iterator[tuple[FakeApiServer, ClusterStore, Admit]]:
    server = FakeApiServer().start()
    server.put("Namespace", {"metadata": {"name": "team-a"}})
    server.put("Node", NODE)
    configuration = k8s_client.Configuration()
    configuration.host = server.url
    with k8s_client.ApiClient(configuration) as api:
        store = ClusterStore(AcceleratorTable.build(), min_rebuild_interval=0)
        source = KubeClusterSource(store, api, kinds=("Node", "Pod", "Namespace"))
        source.start()
        try:
            assert source.wait_loaded(20)
            yield server, store, Admit(build_runtime(Config(), None, store=store, load_policies=False))
        finally:
            source.stop()
            server.close()


def _asked(admit: Admit) -> set[str]:
    final, mutated, validated = admit.create(copy.deepcopy(SMALL))
    assert mutated.allowed and validated.allowed, (mutated.message, validated.message)
    limits = final["spec"]["containers"][0]["resources"]["limits"]
    return {k for k in limits if k.startswith("nvidia.com/")}


def _pods_seen(store: ClusterStore, count: int) -> None:
    eventually(lambda: len(store.snapshot(force=True).pods) == count, what=f"{count} pods in the model")


def test_smallest_profile_while_a_slice_of_it_is_free(cluster: tuple[FakeApiServer, ClusterStore, Admit]) -> None:
    server, store, admit = cluster
    server.put("Pod", bound("one", "nvidia.com/mig-1g.10gb"))
    _pods_seen(store, 1)
    assert _asked(admit) == {"nvidia.com/mig-1g.10gb"}


def test_a_larger_free_profile_when_every_small_slice_is_taken(
    cluster: tuple[FakeApiServer, ClusterStore, Admit],
) -> None:
    server, store, admit = cluster
    server.put("Pod", bound("one", "nvidia.com/mig-1g.10gb"))
    server.put("Pod", bound("two", "nvidia.com/mig-1g.10gb"))
    # A finished pod holds nothing: it does not make the 2g.20gb slice busy.
    server.put("Pod", bound("done", "nvidia.com/mig-2g.20gb", phase="Succeeded"))
    _pods_seen(store, 3)
    assert _asked(admit) == {"nvidia.com/mig-2g.20gb"}
    server.put("Pod", bound("three", "nvidia.com/mig-2g.20gb"))
    _pods_seen(store, 4)
    assert _asked(admit) == {"nvidia.com/mig-3g.40gb"}
    # Every slice taken: the smallest, which waits for the first slice to free.
    server.put("Pod", bound("four", "nvidia.com/mig-3g.40gb"))
    _pods_seen(store, 5)
    assert _asked(admit) == {"nvidia.com/mig-1g.10gb"}
    # A slice freed: back to the smallest profile as soon as the model sees the pod gone.
    server.delete("Pod", "team-a/one")
    _pods_seen(store, 4)
    assert _asked(admit) == {"nvidia.com/mig-1g.10gb"}


def test_a_named_profile_is_kept_even_when_taken(cluster: tuple[FakeApiServer, ClusterStore, Admit]) -> None:
    server, store, admit = cluster
    server.put("Pod", bound("one", "nvidia.com/mig-2g.20gb"))
    _pods_seen(store, 1)
    pod = copy.deepcopy(SMALL)
    pod["spec"]["containers"][0]["resources"]["limits"] = {"nvidia.com/mig-2g.20gb": "1"}
    final, mutated, validated = admit.create(pod)
    assert mutated.allowed and validated.allowed
    assert final["spec"]["containers"][0]["resources"]["limits"] == {"nvidia.com/mig-2g.20gb": "1"}
