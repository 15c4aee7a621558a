"""The node side of a cluster snapshot: every node's facts with the wings' parts folded in, and the type index.

It reads the nodes and the kinds the fact readers read (`NODE_SIDE_KINDS`), so the store keeps it while only
other kinds change: the pods (the kubelet's status updates, every few seconds per pod at 150,000 pods; building it
was 0.17 s of every rebuild at 10,000 nodes), TenantQuotas, Namespaces, profiles, policies (issue 36).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from policies.vocabulary.accelerator_types import AcceleratorTable
from policies.vocabulary.objects import ObjectView
from webhook.cluster.fact_readers import FACT_READERS, READ_KINDS
from webhook.cluster.metrics import export_topology_ages
from webhook.cluster.node_facts import NodeFacts, node_facts
from webhook.cluster.type_index import TypeSummary, build_type_index

# Node key -> (the node object's version, its facts as last read).
FactsCache = dict[str, tuple[str, NodeFacts]]

# What the node side reads: a change to any other kind keeps it.
NODE_SIDE_KINDS = frozenset(("Node", *READ_KINDS))


@dataclass(frozen=True, slots=True)
class NodeSide:
    """What a build reads from everything but the pods; shared by the snapshots built while only pods change
    (snapshots are immutable: nothing changes these after the build)."""

    generation: int  # the store's count of changes to anything but pods, when this was read
    facts: dict[str, NodeFacts]
    node_objects: dict[str, dict[str, Any]]
    types: dict[str, TypeSummary]
    # A topology document's age and freshness move with the clock, not with a change: read again each build.
    timed: bool


def read_node_side(
    generation: int, objects: Mapping[str, Mapping[str, dict[str, Any]]], cache: FactsCache,
    table: AcceleratorTable, staleness_seconds: float, gpu_taint_keys: Iterable[str],
) -> tuple[NodeSide, FactsCache]:
    """The node side of `objects` (kind -> key -> object), and the facts cache for the next read: a node whose
    object did not change and that has no topology document keeps the facts read last time."""
    now = datetime.now(UTC)
    facts: dict[str, NodeFacts] = {}
    fresh_cache: FactsCache = {}
    for key, node in objects["Node"].items():
        version = _version(node)
        cached = cache.get(key)
        # Topology staleness depends on time, so nodes with a topology document are recomputed.
        if cached is not None and cached[0] == version and cached[1].topology is None:
            item = cached[1]
        else:
            item = node_facts(node, table, staleness_seconds, now)
        facts[item.name] = item
        fresh_cache[key] = (version, item)
    read_kinds = {kind: objects[kind] for kind in NODE_SIDE_KINDS}
    for _name, read in FACT_READERS.steps:  # the wings' facts (webhook/cluster/fact_readers.py)
        facts = read(facts, read_kinds, table)
    export_topology_ages(facts.values())
    side = NodeSide(
        generation=generation,
        facts=facts,
        node_objects=dict(objects["Node"]),
        types=build_type_index(facts.values(), gpu_taint_keys),
        timed=any(f.topology is not None for f in facts.values()),
    )
    return side, fresh_cache


def _version(obj: dict[str, Any]) -> str:
    version = ObjectView(obj).resource_version
    if version:
        return version
    # YAML objects carry no resourceVersion: identity of the dict is enough (they are replaced, not edited).
    return f"id:{id(obj)}"

