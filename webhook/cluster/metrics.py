"""Metrics of the cluster model."""

from __future__ import annotations

from collections.abc import Iterable

from policies.kernel.metric_kinds import counter, gauge
from policies.kernel.metrics import replace_series
from webhook.cluster.node_facts import NodeFacts

TOPOLOGY_AGE = gauge(
    "kgwe_topology_age_seconds", "Age of the agent's topology document per node (absent: no document)", ["node"]
)


def export_topology_ages(nodes: Iterable[NodeFacts]) -> None:
    """One series per node with an agent document; a node without one (or gone) has none."""
    replace_series(TOPOLOGY_AGE, {
        (facts.name,): facts.topology_age_seconds for facts in nodes if facts.topology_age_seconds is not None
    })


CLUSTER_DIRECTORY_ERRORS = gauge(
    "kgwe_cluster_directory_errors",
    "Local mode: files of the cluster directory whose current version is refused (their last good version, if "
    "any, is served), plus 1 while the directory cannot be listed",
)
CLUSTER_DIRECTORY_REFUSED = counter(
    "kgwe_cluster_directory_refused",
    "Local mode: versions of cluster directory files refused (invalid YAML, empty, not a Kubernetes object)",
)
