"""Publishing the topology on the agent's own Node: desired labels and annotations, diff, one merge patch.

The node object is the only state: what to write is decided by comparing the desired metadata with what
the node carries now, so a restarted agent writes nothing when nothing changed. The document's timestamp
is the time its content last changed; the heartbeat annotation says the agent is alive and is refreshed on
a slow interval, so an idle node costs one small patch per interval.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from policies.vocabulary.accelerator_types import UNKNOWN
from policies.vocabulary.topology_schema import (
    ANNOTATION,
    HEARTBEAT_ANNOTATION,
    LABEL_ACCELERATOR_TYPE,
    LABEL_NVLINK_CLIQUE,
    LABEL_NVLINK_DOMAIN_SIZE,
    TopologyDocument,
)

FIELD_MANAGER = "kgwe-agent"
MERGE_PATCH = "application/merge-patch+json"
OWNED_LABELS = (LABEL_ACCELERATOR_TYPE, LABEL_NVLINK_DOMAIN_SIZE, LABEL_NVLINK_CLIQUE)


@dataclass(frozen=True)
class NodeMetadata:
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)


def desired_labels(doc: TopologyDocument) -> dict[str, str]:
    """The agent's labels for this document. An unknown type is left unlabelled so GFD's labels still count."""
    labels = {LABEL_NVLINK_DOMAIN_SIZE: str(doc.nvlink.domain_size)}
    if doc.accelerator_type != UNKNOWN:
        labels[LABEL_ACCELERATOR_TYPE] = doc.accelerator_type
    if doc.fabric is not None:
        labels[LABEL_NVLINK_CLIQUE] = doc.fabric.clique
    return labels


def format_heartbeat(now: datetime) -> str:
    return now.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _parse_time(raw: str) -> datetime | None:
    try:
        stamp = datetime.fromisoformat(raw.replace("Z", "+00:00"))
    except ValueError:
        return None
    return stamp if stamp.tzinfo else stamp.replace(tzinfo=UTC)


def heartbeat_due(raw: str | None, now: datetime, interval: float) -> bool:
    """Due when missing, unreadable, at least `interval` old, or so far ahead (a clock jump) it would never age."""
    stamp = _parse_time(raw) if raw else None
    if stamp is None:
        return True
    age = (now - stamp).total_seconds()
    return age >= interval or age < -interval


def _content(doc: TopologyDocument) -> dict[str, Any]:
    return doc.model_dump(mode="json", by_alias=True, exclude_none=True, exclude={"timestamp"})


def same_topology(raw: str | None, doc: TopologyDocument) -> bool:
    """Whether the node's current annotation says the same as `doc`, its timestamp aside."""
    if not raw:
        return False
    try:
        current = TopologyDocument.model_validate_json(raw)
    except ValueError:
        return False
    return _content(current) == _content(doc)


def plan_patch(
    current: NodeMetadata, doc: TopologyDocument, now: datetime, heartbeat_interval: float
) -> dict[str, Any] | None:
    """The JSON merge patch that brings the node to `doc`, or None when nothing needs writing."""
    wanted = desired_labels(doc)
    labels: dict[str, str | None] = {}
    for key in OWNED_LABELS:
        if current.labels.get(key) != wanted.get(key):
            labels[key] = wanted.get(key)  # None removes a label this agent set earlier
    annotations: dict[str, str | None] = {}
    if not same_topology(current.annotations.get(ANNOTATION), doc):
        annotations[ANNOTATION] = doc.to_annotation()
    if labels or annotations or heartbeat_due(current.annotations.get(HEARTBEAT_ANNOTATION), now, heartbeat_interval):
        annotations[HEARTBEAT_ANNOTATION] = format_heartbeat(now)
    else:
        return None
    metadata: dict[str, Any] = {"annotations": annotations}
    if labels:
        metadata["labels"] = labels
    return {"metadata": metadata}


class NodePublisher:
    """Reads and patches one Node through a `kubernetes.client.CoreV1Api`."""

    def __init__(self, core_v1: Any, node_name: str, heartbeat_interval: float = 120.0) -> None:
        self.core_v1 = core_v1
        self.node_name = node_name
        self.heartbeat_interval = heartbeat_interval

    def read(self) -> NodeMetadata:
        node = self.core_v1.read_node(self.node_name)
        meta = node.metadata
        return NodeMetadata(labels=dict(meta.labels or {}), annotations=dict(meta.annotations or {}))

    def publish(self, doc: TopologyDocument, current: NodeMetadata, now: datetime) -> dict[str, Any] | None:
        """Send the patch if one is needed; returns what was sent."""
        patch = plan_patch(current, doc, now, self.heartbeat_interval)
        if patch is not None:
            self.core_v1.patch_node(
                self.node_name, patch, field_manager=FIELD_MANAGER, _content_type=MERGE_PATCH
            )
        return patch
