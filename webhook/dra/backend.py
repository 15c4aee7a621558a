"""Which way a node pool's GPUs are asked for: extended resources (device plugin) or DRA claims.

Per node: a configured node pool (`dra.nodePools`, first match) decides when the node publishes its
GPUs both ways; otherwise `dra.backend` when forced; otherwise (`auto`) DRA when the node's GPUs are in
ResourceSlices and it advertises no NVIDIA extended resources. A node that publishes only one way is
always rendered that way: naming a backend a node does not offer would leave pods Pending.
Per type: the backend most of its nodes use (from a bounded sample of the type's nodes).
"""

from __future__ import annotations

from decimal import Decimal

from webhook.cluster.model import ClusterModel
from webhook.cluster.node_facts import GPU_RESOURCE, MIG_RESOURCE_PREFIX, NodeFacts
from webhook.wing_config import DraConfig

DEVICE_PLUGIN = "device-plugin"
DRA = "dra"
SAMPLE = 64


def _extended(facts: NodeFacts) -> bool:
    return any(
        (key == GPU_RESOURCE or key.startswith(MIG_RESOURCE_PREFIX)) and value > Decimal(0)
        for key, value in facts.allocatable.items()
    )


def node_backend(facts: NodeFacts, config: DraConfig) -> str:
    has_dra = facts.dra is not None and bool(facts.dra.gpus or facts.dra.mig)
    has_extended = _extended(facts)
    if not has_dra:
        return DEVICE_PLUGIN
    if not has_extended:
        return DRA
    for pool in config.node_pools:
        if all(facts.labels.get(k) == v for k, v in pool.node_selector.items()):
            return pool.backend
    return DRA if config.backend == DRA else DEVICE_PLUGIN


def type_backend(model: ClusterModel, type_id: str, config: DraConfig) -> str:
    """The backend most of a type's (sampled) nodes use; remembered per snapshot and configuration."""
    key = ("dra.backend", type_id)
    known = model.derived.get(key)
    if known is not None and known[0] is config:
        return str(known[1])
    backend = _type_backend(model, type_id, config)
    model.derived[key] = (config, backend)
    return backend


def _type_backend(model: ClusterModel, type_id: str, config: DraConfig) -> str:
    nodes = model.types[type_id].nodes[:SAMPLE]
    dra = sum(1 for name in nodes if node_backend(model.nodes[name], config) == DRA)
    return DRA if nodes and dra * 2 > len(nodes) else DEVICE_PLUGIN


def split_by_backend(
    model: ClusterModel, candidates: list[str], config: DraConfig
) -> tuple[str, list[str], list[str]]:
    """(backend of the most preferred candidate, the candidates rendered that way, the others).

    One pod is rendered one way (it asks for extended resources or for claims, not both), so types of
    the other backend are dropped; the caller warns about them.
    """
    if not candidates:
        return DEVICE_PLUGIN, [], []
    backends = {t: type_backend(model, t, config) for t in candidates}
    backend = backends[candidates[0]]
    kept = [t for t in candidates if backends[t] == backend]
    return backend, kept, [t for t in candidates if backends[t] != backend]
