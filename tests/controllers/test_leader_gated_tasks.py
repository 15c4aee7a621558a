"""Two replicas' controllers against one fake API server: the leader-only tasks run on the replica holding
the Lease only, the follower exports nothing, and when the leader stops (releasing the Lease) the other
replica's tasks start."""

from __future__ import annotations

from pathlib import Path

from kube_fake_apiserver import FakeApiServer
from prometheus_client import CollectorRegistry
from waiting import eventually

from webhook.cluster.model import ClusterStore
from webhook.cluster.yaml_source import YamlDirectorySource
from webhook.config import load_config
from webhook.controllers.runner import Controllers, build_controllers

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"




def exported(registry: CollectorRegistry) -> int:
    return sum(len(f.samples) for f in registry.collect() if f.name == "kgwe_pod_hourly_cost")


def replica(api_client, registry: CollectorRegistry) -> Controllers:
    config = load_config(EXAMPLES / "config.yaml")
    store = ClusterStore(config.accelerator_table(), min_rebuild_interval=0.0)
    YamlDirectorySource(EXAMPLES / "cluster", store).load()
    controllers = build_controllers(store, config, api_client, namespace="kgwe-system", registry=registry,
                                    interval_seconds=0.02)
    controllers.elector.retry_seconds = 0.02
    return controllers


def test_only_the_leader_runs_leader_only_tasks_and_the_other_takes_over(
    apiserver: FakeApiServer, api_client
) -> None:
    registry_a, registry_b = CollectorRegistry(), CollectorRegistry()
    a, b = replica(api_client, registry_a), replica(api_client, registry_b)
    a.start()
    try:
        eventually(lambda: a.elector.is_leader() and a.bound_pods.task.state().runs >= 2)
        b.start()
        try:
            # b competes for many rounds, and its leader-only tasks never run.
            eventually(lambda: b.elector.task.state().runs >= 10)
            assert not b.elector.is_leader()
            assert b.bound_pods.task.state().runs == 0
            assert exported(registry_b) == 0 and exported(registry_a) > 0
            # a stops: it releases the Lease after its own tasks ended, and b's tasks start.
            a.stop()
            assert not any(s.running for s in a.supervisor.states())
            eventually(lambda: b.elector.is_leader() and b.bound_pods.task.state().runs >= 2)
            eventually(lambda: exported(registry_b) > 0)
            assert apiserver.leases["kgwe-system/kgwe-controllers"]["spec"]["holderIdentity"] == b.elector.identity
        finally:
            b.stop()
    finally:
        a.stop()
