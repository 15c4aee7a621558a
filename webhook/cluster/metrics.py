"""Metrics of the cluster model."""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client import Counter, Gauge

from webhook.cluster.node_facts import NodeFacts

TOPOLOGY_AGE = Gauge(
    "kgwe_topology_age_seconds", "Age of the agent's topology document per node (absent: no document)", ["node"]
)
_exported: set[str] = set()


def export_topology_ages(nodes: Iterable[NodeFacts]) -> None:
    seen = set()
    for facts in nodes:
        if facts.topology_age_seconds is None:
            continue
        TOPOLOGY_AGE.labels(node=facts.name).set(facts.topology_age_seconds)
        seen.add(facts.name)
    for gone in _exported - seen:
        TOPOLOGY_AGE.remove(gone)
    _exported.clear()
    _exported.update(seen)


CLUSTER_DIRECTORY_ERRORS = Gauge(
    "kgwe_cluster_directory_errors",
    "Local mode: files of the cluster directory whose current version is refused (their last good version, if "
    "any, is served), plus 1 while the directory cannot be listed",
)
CLUSTER_DIRECTORY_REFUSED = Counter(
    "kgwe_cluster_directory_refused",
    "Local mode: versions of cluster directory files refused (invalid YAML, empty, not a Kubernetes object)",
)
