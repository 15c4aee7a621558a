"""The controllers `kgwe serve` runs beside the webhooks, behind one leader election."""

from __future__ import annotations

from dataclasses import dataclass

from kubernetes import client as k8s_client
from prometheus_client import REGISTRY, CollectorRegistry

from webhook.cluster.model import ClusterStore
from webhook.config import Config
from webhook.controllers.bound_pods import BoundPodController, kube_pod_patcher
from webhook.controllers.leader import LeaderElector, pod_namespace
from webhook.gangs.controller import GangController, kube_pod_writer
from webhook.gangs.ledger import GangStore


@dataclass
class Controllers:
    elector: LeaderElector
    bound_pods: BoundPodController
    gangs: GangController | None = None  # webhook.gangs: ungates complete gangs

    def start(self) -> None:
        self.elector.start()
        self.bound_pods.start()
        if self.gangs is not None:
            self.gangs.start()

    def stop(self) -> None:
        if self.gangs is not None:
            self.gangs.stop()
        self.bound_pods.stop()
        self.elector.stop()  # releases the lease so another replica takes over at once


def build_controllers(
    store: ClusterStore,
    config: Config,
    api_client: k8s_client.ApiClient | None,
    *,
    namespace: str | None = None,
    interval_seconds: float = 5.0,
    registry: CollectorRegistry | None = REGISTRY,
    gang_store: GangStore | None = None,
) -> Controllers:
    """Controllers over `store`; with no API client (YAML mode) nothing is patched and this replica leads."""
    elector = LeaderElector(api_client, namespace=namespace or pod_namespace())
    patcher = kube_pod_patcher(api_client) if api_client is not None else None
    bound = BoundPodController(
        store, config, patcher, interval_seconds=interval_seconds, is_leader=elector.is_leader, registry=registry
    )
    gangs = None
    if gang_store is not None:
        writer = kube_pod_writer(api_client) if api_client is not None else None
        gangs = GangController(
            store, gang_store, config, writer, interval_seconds=interval_seconds, is_leader=elector.is_leader
        )
    return Controllers(elector, bound, gangs)
