"""Whether a node's `kgwe.io/topology` document (written by the KGWE agent) is fresh enough to trust.

Its age is the younger of the document's own timestamp and the agent's heartbeat annotation. Past
`topologyStalenessSeconds` it is stale: the reading falls back to GFD labels and also distrusts the
agent's own labels (type, NVLink domain size, clique), which were written at the same time.
"""

from __future__ import annotations

from datetime import UTC, datetime

from policies.vocabulary.topology_schema import ANNOTATION, HEARTBEAT_ANNOTATION, TopologyDocument
from webhook.cluster.node_reading import NodeReading


def parse_topology(annotations: dict[str, str]) -> TopologyDocument | None:
    """The agent's topology document; None when absent or unreadable."""
    raw = annotations.get(ANNOTATION)
    if not raw:
        return None
    try:
        return TopologyDocument.model_validate_json(raw)
    except ValueError:
        return None


def heartbeat(annotations: dict[str, str]) -> datetime | None:
    """When the agent last said it was alive (UTC assumed for a stamp without a zone)."""
    raw = annotations.get(HEARTBEAT_ANNOTATION)
    if not raw:
        return None
    try:
        stamp = datetime.fromisoformat(raw.replace("Z", "+00:00"))
    except ValueError:
        return None
    return stamp if stamp.tzinfo else stamp.replace(tzinfo=UTC)


def topology_freshness(reading: NodeReading) -> None:
    """The topology-freshness step: the document, its age, stale or not; `fresh` only when trusted."""
    annotations = reading.annotations
    topology = parse_topology(annotations)
    if topology is not None:
        current = reading.now or datetime.now(UTC)
        age = topology.age_seconds(current)
        beat = heartbeat(annotations)
        if beat is not None:
            age = min(age, max(0.0, (current - beat).total_seconds()))
        reading.age = age
        reading.stale = age > reading.staleness_seconds
        if reading.stale:
            reading.notes.append(
                f"topology {int(age)}s old (stale after {int(reading.staleness_seconds)}s): using GFD labels"
            )
    elif ANNOTATION in annotations:
        reading.notes.append("topology annotation unreadable: using GFD labels")
    reading.topology = topology
    reading.fresh = topology if topology is not None and not reading.stale else None
