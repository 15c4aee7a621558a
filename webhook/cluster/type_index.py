"""The per-type index of a snapshot: for each accelerator type, its nodes and what they offer.

Placement reads only this index, never the node list, so a request costs the same on 10 nodes as on
10,000: GPUs per node, NVLink domains and cliques, MIG offers by profile and strategy, MPS, time-sliced
and exclusive nodes, the GPU taints, and the label that selects exactly the type's nodes (the agent's
label first, then GFD's product, then cloud labels). Built from the nodes' facts each time a snapshot is
built (webhook/cluster/model.py `ClusterStore`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from decimal import Decimal

from policies.vocabulary import keys
from webhook.cluster.node_facts import AMD_GPU_RESOURCE, GPU_RESOURCE, NodeFacts, Taint


@dataclass
class MigOffer:
    """A MIG profile of one product, with where it is offered."""

    profile: str
    devices: int = 0
    nodes: list[str] = field(default_factory=list)
    strategies: set[str] = field(default_factory=set)
    products: set[str] = field(default_factory=set)  # single-strategy product labels, e.g. ...-MIG-1g.10gb


@dataclass
class TypeSummary:
    """Everything placement needs to know about one accelerator type, precomputed per snapshot."""

    type_id: str
    nodes: list[str] = field(default_factory=list)
    gpus_total: int = 0
    max_gpus_per_node: int = 0
    max_nvlink_domain: int = 0
    # label key -> values seen on every node of this type; used to select the type's nodes.
    selector_candidates: dict[str, set[str]] = field(default_factory=dict)
    gpu_taints: set[Taint] = field(default_factory=set)
    mig: dict[str, MigOffer] = field(default_factory=dict)
    mps_nodes: list[str] = field(default_factory=list)
    timeslice_nodes: list[str] = field(default_factory=list)
    exclusive_nodes: list[str] = field(default_factory=list)
    max_gpus_exclusive_node: int = 0
    cliques: dict[str, list[str]] = field(default_factory=dict)
    clique_labels: set[str] = field(default_factory=set)
    nvlink_domains: dict[int, int] = field(default_factory=dict)  # domain size -> node count
    dra_nodes: list[str] = field(default_factory=list)  # nodes publishing this type through DRA
    dra_products: set[str] = field(default_factory=set)  # their devices' productName attributes

    def selector(self) -> tuple[str, list[str]] | None:
        """A (label key, values) pair that selects exactly this type's nodes, best key first."""
        for key, values in self.selector_candidates.items():
            return key, sorted(values)
        return None


def build_type_index(nodes: Iterable[NodeFacts], gpu_taint_keys: Iterable[str]) -> dict[str, TypeSummary]:
    """Each typed node's facts folded into its type's summary; `gpu_taint_keys` are the taint key prefixes
    that mark GPU taints (tolerated for pods KGWE places)."""
    taint_keys = tuple(gpu_taint_keys)
    index: dict[str, TypeSummary] = {}
    for facts in nodes:
        if not facts.accelerator_type:
            continue
        summary = index.setdefault(facts.accelerator_type, TypeSummary(facts.accelerator_type))
        first = not summary.nodes
        summary.nodes.append(facts.name)
        summary.gpus_total += facts.gpu_count
        summary.max_gpus_per_node = max(summary.max_gpus_per_node, facts.gpu_count)
        summary.max_nvlink_domain = max(summary.max_nvlink_domain, facts.nvlink_domain_size)
        summary.nvlink_domains[facts.nvlink_domain_size] = summary.nvlink_domains.get(facts.nvlink_domain_size, 0) + 1
        # Keep only selector keys every node of the type carries.
        labels = facts.selector_labels()
        if first:
            summary.selector_candidates = {k: {v} for k, v in labels.items()}
        else:
            for key in list(summary.selector_candidates):
                if key in labels:
                    summary.selector_candidates[key].add(labels[key])
                else:
                    del summary.selector_candidates[key]
        for taint in facts.taints:
            if taint.effect in ("NoSchedule", "NoExecute") and taint.key.startswith(taint_keys):
                summary.gpu_taints.add(taint)
        if facts.mig_ready:
            for profile, count in facts.mig_profiles.items():
                offer = summary.mig.setdefault(profile, MigOffer(profile))
                offer.devices += count
                offer.nodes.append(facts.name)
                offer.strategies.add(facts.mig_strategy)
                if facts.mig_strategy == "single" and facts.product:
                    offer.products.add(facts.product)
        if facts.sharing == "mps":
            summary.mps_nodes.append(facts.name)
        elif facts.sharing == "time-slicing":
            summary.timeslice_nodes.append(facts.name)
        elif (not facts.mig_profiles or facts.mig_strategy in ("mixed", "dra")) and _whole_gpus(facts) > 0:
            summary.exclusive_nodes.append(facts.name)
            summary.max_gpus_exclusive_node = max(summary.max_gpus_exclusive_node, _whole_gpus(facts))
        if facts.dra is not None:
            summary.dra_nodes.append(facts.name)
            summary.dra_products.update(facts.dra.products)
        if facts.clique:
            summary.cliques.setdefault(facts.clique, []).append(facts.name)
            if facts.clique_label:
                summary.clique_labels.add(facts.clique_label)
    # Selector keys: the agent's label first, then GFD's product, then cloud labels.
    for summary in index.values():
        summary.selector_candidates = dict(sorted(summary.selector_candidates.items(), key=_selector_rank))
    return index


def _whole_gpus(facts: NodeFacts) -> int:
    """Whole GPUs a pod can ask for on the node: NVIDIA's or AMD's extended resource, else DRA GPU devices."""
    extended = facts.allocatable.get(GPU_RESOURCE, Decimal(0)) or facts.allocatable.get(AMD_GPU_RESOURCE, Decimal(0))
    if not extended and facts.dra is not None:
        return len(facts.dra.gpus)
    return int(extended)


_SELECTOR_ORDER = (
    keys.ACCELERATOR_TYPE,
    keys.NVIDIA_GPU_PRODUCT,
    keys.AMD_GPU_PRODUCT_NAME,
    keys.AMD_BETA_PREFIX + keys.AMD_GPU_PRODUCT_NAME,
    keys.AMD_GPU_DEVICE_ID,
    keys.GKE_ACCELERATOR,
    keys.KARPENTER_GPU_NAME,
    keys.INSTANCE_TYPE,
)


def _selector_rank(item: tuple[str, set[str]]) -> int:
    return _SELECTOR_ORDER.index(item[0]) if item[0] in _SELECTOR_ORDER else len(_SELECTOR_ORDER)
