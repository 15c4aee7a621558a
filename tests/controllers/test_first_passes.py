"""`kgwe serve` holds its controllers' first passes (each over every pod) until the read API's light pass has
answered (webhook/controllers/runner.py `FirstPasses`, issue 36): until then the replica that leads acts as a
follower does (its leader-only tasks stand by, nothing is exported or patched), and once they are let go every
controller is woken and acts."""

from __future__ import annotations

import threading
from pathlib import Path

from kube_fake_apiserver import FakeApiServer
from prometheus_client import CollectorRegistry
from waiting import eventually

from webhook.cluster.model import ClusterStore
from webhook.cluster.yaml_source import YamlDirectorySource
from webhook.config import load_config
from webhook.controllers.runner import build_controllers

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _exported(registry: CollectorRegistry) -> int:
    return sum(len(f.samples) for f in registry.collect() if f.name == "kgwe_pod_hourly_cost")


def test_the_leaders_controllers_act_only_once_their_first_passes_are_let_go(
    apiserver: FakeApiServer, api_client
) -> None:
    config = load_config(EXAMPLES / "config.yaml")
    store = ClusterStore(config.accelerator_table(), min_rebuild_interval=0.0)
    YamlDirectorySource(EXAMPLES / "cluster", store).load()
    let_go = threading.Event()
    registry = CollectorRegistry()
    controllers = build_controllers(store, config, api_client, namespace="kgwe-system", registry=registry,
                                    interval_seconds=0.02, first_passes_after=let_go.is_set)
    controllers.elector.retry_seconds = 0.02
    quotas = controllers.wing("quotas")
    assert quotas is not None
    controllers.start()
    try:
        eventually(lambda: controllers.elector.is_leader() and controllers.elector.task.state().runs >= 10)
        assert not controllers.acting()
        assert controllers.bound_pods.task.state().runs == 0 and _exported(registry) == 0
        assert quotas.controller.last is None  # its start and the store's wakes found it standing by
        let_go.set()
        eventually(lambda: controllers.bound_pods.task.state().runs >= 1 and quotas.controller.last is not None)
        assert controllers.acting()
        eventually(lambda: _exported(registry) > 0)
        first = controllers.first.task
        assert first is not None
        eventually(lambda: not first.state().running)  # its thread ended with the wait
    finally:
        controllers.stop()


def test_without_a_condition_the_controllers_act_from_the_start() -> None:
    config = load_config(EXAMPLES / "config.yaml")
    store = ClusterStore(config.accelerator_table(), min_rebuild_interval=0.0)
    controllers = build_controllers(store, config, None, registry=CollectorRegistry())
    assert controllers.first.task is None and controllers.first.is_open()
    assert controllers.acting()  # no API client: this replica leads
