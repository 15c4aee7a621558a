"""What flows through the reading of one node: the node's labels, annotations and allocatable, and the
facts the reading steps derive from them, in order (webhook/cluster/node_facts.py `NODE_STEPS`).

Each step is a function of the reading alone that fills its own fields (the comment above each group
names the step). The node object is read once, at construction, through its `NodeView`; steps never see
another node.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any

from policies.vocabulary.accelerator_types import AcceleratorTable
from policies.vocabulary.nodes import NodeView
from policies.vocabulary.objects import mapping
from policies.vocabulary.quantities import parse_quantity
from policies.vocabulary.topology_schema import TopologyDocument


def int_label(value: str | None) -> int | None:
    """A label value as an integer; None when absent or not one (labels are written by many tools)."""
    if value is None:
        return None
    try:
        return int(str(value).strip())
    except ValueError:
        return None


def read_allocatable(node: NodeView) -> dict[str, Decimal]:
    """The node's allocatable resources (capacity when allocatable is missing); unparsable ones skipped."""
    out: dict[str, Decimal] = {}
    for key, value in node.allocatable.items():
        try:
            out[str(key)] = parse_quantity(value)
        except ValueError:
            continue
    return out


@dataclass(slots=True)
class NodeReading:
    """One node being read. The first group is the node as given; the rest is derived step by step."""

    table: AcceleratorTable
    staleness_seconds: float
    now: datetime | None
    name: str
    labels: dict[str, str]
    annotations: dict[str, str]
    allocatable: dict[str, Decimal]
    notes: list[str] = field(default_factory=list)
    # topology-freshness: the agent's document, its age, and whether it is fresh enough to trust.
    topology: TopologyDocument | None = None
    age: float | None = None
    stale: bool = False
    fresh: TopologyDocument | None = None
    # gfd-labels: the product and memory labels, the MIG strategy and (under MIG single) the profile.
    product: str | None = None
    memory_mib: int | None = None
    mig_strategy: str = "none"
    single_profile: str | None = None
    base_product: str = ""
    # accelerator-type: the type id and which source said so.
    type_id: str = ""
    source: str = "none"
    # sharing: MPS or time-slicing, and how many pods share one GPU.
    sharing: str = "none"
    replicas: int = 1
    # gpu-count: physical GPUs (not MIG devices or sharing replicas).
    gpu_count: int = 0
    # mig: MIG devices per profile, and whether the MIG manager has settled.
    mig_profiles: dict[str, int] = field(default_factory=dict)
    mig_ready: bool = True
    # nvlink-domain: GPUs in one NVLink domain on this node; the multi-node clique and its label key.
    nvlink_domain_size: int = 0
    clique: str | None = None
    clique_label: str | None = None


def _as_strings(value: Any) -> dict[str, str]:
    # Every entry, made a string: a YAML directory's node may carry `nvidia.com/gpu.count: 8` unquoted,
    # and the label still means 8 (the views' `labels` would leave such an entry out).
    return {str(k): str(v) for k, v in mapping(value).items()}


def start_reading(
    node: NodeView, table: AcceleratorTable, staleness_seconds: float, now: datetime | None
) -> NodeReading:
    """A reading of `node` with its name, labels and annotations as strings and its allocatable parsed."""
    metadata = node.metadata
    return NodeReading(
        table=table,
        staleness_seconds=staleness_seconds,
        now=now,
        name=node.name,
        labels=_as_strings(metadata.get("labels")),
        annotations=_as_strings(metadata.get("annotations")),
        allocatable=read_allocatable(node),
    )
