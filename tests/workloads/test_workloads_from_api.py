"""Workloads in the cluster model from the Kubernetes API: watched as optional, view-only kinds."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pytest
from kube_fake_apiserver import FakeApiServer
from kubernetes import client as k8s_client
from patience import WAIT_SECONDS

from policies.vocabulary.accelerator_types import AcceleratorTable
from webhook.assembly import workload_kinds
from webhook.cluster.kube_source import KubeClusterSource
from webhook.cluster.model import ClusterStore
from webhook.cluster.watched_kinds import workload_watches
from webhook.config import Config

DEPLOYMENT = {
    "metadata": {"name": "serve", "namespace": "team-a", "managedFields": [{"manager": "kubectl"}]},
    "spec": {"replicas": 1, "template": {"spec": {"containers": [
        {"name": "c", "image": "busybox", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}},
    "status": {"readyReplicas": 1},
}


@pytest.fixture
def fake_api() -> Iterator[FakeApiServer]:
    server = FakeApiServer().start()
    yield server
    server.close()


def _wait(predicate: Callable[[], bool], timeout: float = WAIT_SECONDS) -> bool:
    """Poll until the watch delivered (a wait for an event, not a timing assertion)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


def test_workloads_are_watched_and_missing_or_forbidden_kinds_break_nothing(fake_api: FakeApiServer) -> None:
    fake_api.put("Deployment", DEPLOYMENT)
    fake_api.fail_next("Job", 403)  # no RBAC for Jobs: treated as absent, not retried in a tight loop
    configuration = k8s_client.Configuration()
    configuration.host = fake_api.url
    kinds = workload_kinds(Config())
    assert ("Deployment", "apps/v1", "deployments") in kinds
    assert ("JobSet", "jobset.x-k8s.io/v1alpha2", "jobsets") in kinds
    with k8s_client.ApiClient(configuration) as api:
        store = ClusterStore(AcceleratorTable.build(), min_rebuild_interval=0)
        source = KubeClusterSource(store, api, workloads=workload_watches(kinds), backoff_base=0.01,
                                   missing_crd_retry_seconds=60)
        source.start()
        try:
            assert source.wait_loaded(20)  # JobSets, RayJobs, ... are not served here: the model loads anyway
            assert source.wait_all_listed(20)  # what `kgwe audit` waits for before it stops the watch
            assert "Deployment/team-a/serve" in store.snapshot(force=True).workloads
            kept = store.snapshot().workloads["Deployment/team-a/serve"]
            assert "status" not in kept and "managedFields" not in kept["metadata"]
            assert _wait(lambda: source.status["Job"].crd_missing and source.status["JobSet"].crd_missing)
            fake_api.put("Deployment", {**DEPLOYMENT, "metadata": {"name": "second", "namespace": "team-b"}})
            assert _wait(lambda: "Deployment/team-b/second" in store.snapshot().workloads)
        finally:
            source.stop()


def test_workload_admission_off_watches_no_workloads() -> None:
    assert workload_kinds(Config.model_validate({"workloads": {"enabled": False}})) == []
