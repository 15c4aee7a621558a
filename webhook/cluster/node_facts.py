"""What KGWE knows about one node's GPUs, derived from its labels, allocatable and topology annotation.

Sources, best first: the agent's `kgwe.io/topology` annotation while it is fresh, the agent's labels,
NVIDIA GFD labels, AMD's node labeller, then GKE, Karpenter and AKS labels. A node with GPUs but none of
these is type `unknown`: shown, never selected, never an error.

`node_facts` reads a node through `NODE_STEPS`, small named steps over one `NodeReading`
(webhook/cluster/node_reading.py), each in the module named after what it decides: freshness of the
agent's topology (topology_freshness.py), the type (node_type.py, AMD in amd.py), sharing
(node_sharing.py), physical GPUs (node_gpus.py), MIG (node_mig.py), NVLink domain-size inference and
cliques (nvlink_domain.py).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any

from policies.vocabulary import keys, resources
from policies.vocabulary.accelerator_types import MIXED, UNKNOWN, AcceleratorTable
from policies.vocabulary.nodes import NodeView
from policies.vocabulary.topology_schema import LABEL_ACCELERATOR_TYPE, TopologyDocument
from webhook.cluster.node_devices import DraNodeDevices
from webhook.cluster.node_gpus import gpu_count
from webhook.cluster.node_mig import mig
from webhook.cluster.node_reading import NodeReading, start_reading
from webhook.cluster.node_sharing import sharing
from webhook.cluster.node_type import accelerator_type, gfd_labels
from webhook.cluster.nvlink_domain import nvlink_domain
from webhook.cluster.topology_freshness import topology_freshness

NodeStep = Callable[[NodeReading], None]

GPU_RESOURCE = resources.NVIDIA_GPU
MIG_RESOURCE_PREFIX = resources.NVIDIA_MIG_PREFIX
GPU_RESOURCE_PREFIXES = resources.GPU_RESOURCE_PREFIXES

L_PRODUCT = keys.NVIDIA_GPU_PRODUCT
L_MEMORY = keys.NVIDIA_GPU_MEMORY
L_COUNT = keys.NVIDIA_GPU_COUNT
L_REPLICAS = keys.NVIDIA_GPU_REPLICAS
L_SHARING = keys.NVIDIA_GPU_SHARING_STRATEGY
L_MIG_STRATEGY = keys.NVIDIA_MIG_STRATEGY
L_MIG_STATE = keys.NVIDIA_MIG_CONFIG_STATE
L_CLIQUE = keys.NVIDIA_GPU_CLIQUE
L_PRESENT = keys.NVIDIA_GPU_PRESENT
L_FAMILY = keys.NVIDIA_GPU_FAMILY
L_GKE_ACCEL = keys.GKE_ACCELERATOR
L_GKE_COUNT = keys.GKE_ACCELERATOR_COUNT
L_GKE_PARTITION = keys.GKE_GPU_PARTITION_SIZE
L_GKE_SHARING = keys.GKE_GPU_SHARING_STRATEGY
L_GKE_MAX_SHARED = keys.GKE_MAX_SHARED_CLIENTS
L_KARPENTER_NAME = keys.KARPENTER_GPU_NAME
L_KARPENTER_MEMORY = keys.KARPENTER_GPU_MEMORY
L_KARPENTER_COUNT = keys.KARPENTER_GPU_COUNT
L_AKS_ACCEL = keys.AKS_ACCELERATOR
L_INSTANCE_TYPE = keys.INSTANCE_TYPE
AMD_GPU_RESOURCE = resources.AMD_GPU
L_AMD_PRODUCT = keys.AMD_GPU_PRODUCT_NAME
L_AMD_VRAM = keys.AMD_GPU_VRAM
L_AMD_FAMILY = keys.AMD_GPU_FAMILY
L_AMD_DEVICE_ID = keys.AMD_GPU_DEVICE_ID
AMD_BETA_PREFIX = keys.AMD_BETA_PREFIX


@dataclass(frozen=True)
class Taint:
    key: str
    value: str | None
    effect: str


@dataclass
class NodeFacts:
    name: str
    labels: dict[str, str]
    accelerator_type: str  # a type id, `unknown`, `mixed`, or "" for a node without GPUs
    type_source: str  # topology | agent-label | gfd | amd-labeller | gke | karpenter | aks | none
    gpu_count: int  # physical GPUs (not MPS or time-slicing replicas)
    gpu_memory_mib: int | None
    product: str | None
    allocatable: dict[str, Decimal]
    taints: tuple[Taint, ...]
    unschedulable: bool
    mig_strategy: str  # none | single | mixed | gke
    mig_ready: bool  # nvidia.com/mig.config.state == success (or no mig-manager at all)
    mig_profiles: dict[str, int]  # profile -> devices on the node
    sharing: str  # none | mps | time-slicing
    replicas: int
    nvlink_domain_size: int
    clique: str | None
    clique_label: str | None  # the label key carrying the clique (kgwe.io/nvlink-clique or nvidia.com/gpu.clique)
    topology: TopologyDocument | None = None
    topology_age_seconds: float | None = None
    topology_stale: bool = False
    notes: list[str] = field(default_factory=list)
    # GPUs the node publishes through DRA ResourceSlices (webhook/cluster/node_devices.py, read by the DRA
    # wing's fact reader), None without any.
    dra: DraNodeDevices | None = None

    @property
    def has_gpus(self) -> bool:
        return self.gpu_count > 0 or any(self._gpu_allocatable()) or bool(self.dra and (self.dra.gpus or self.dra.mig))

    def _gpu_allocatable(self) -> list[str]:
        return [k for k, v in self.allocatable.items() if k.startswith(GPU_RESOURCE_PREFIXES) and v > 0]

    @property
    def is_typed(self) -> bool:
        return self.accelerator_type not in ("", UNKNOWN, MIXED)

    def selector_labels(self) -> dict[str, str]:
        """Labels that identify this node's accelerator type, usable in node selectors, best first."""
        out: dict[str, str] = {}
        for key in (
            LABEL_ACCELERATOR_TYPE,
            L_PRODUCT,
            L_AMD_PRODUCT,
            AMD_BETA_PREFIX + L_AMD_PRODUCT,
            L_AMD_DEVICE_ID,
            L_GKE_ACCEL,
            L_KARPENTER_NAME,
            L_INSTANCE_TYPE,
        ):
            if key in self.labels:
                out[key] = self.labels[key]
        return out


def _taints(node: NodeView) -> tuple[Taint, ...]:
    taints = []
    for taint in node.taints:
        if taint.get("key") and taint.get("effect"):
            taints.append(Taint(str(taint["key"]), taint.get("value"), str(taint["effect"])))
    return tuple(taints)


# Reading a node, in order: each step fills its part of the `NodeReading` (webhook/cluster/node_reading.py)
# and may read what earlier steps filled. Each lives in the module named after what it decides.
NODE_STEPS: tuple[tuple[str, NodeStep], ...] = (
    ("topology-freshness", topology_freshness),  # the agent's document, trusted only while fresh
    ("gfd-labels", gfd_labels),  # product, memory, MIG strategy
    ("accelerator-type", accelerator_type),  # the type id and its source
    ("sharing", sharing),  # MPS or time-slicing, replicas
    ("gpu-count", gpu_count),  # physical GPUs; `unknown` for untyped GPUs
    ("mig", mig),  # MIG devices per profile, readiness
    ("nvlink-domain", nvlink_domain),  # NVLink domain size (inferred without the agent), clique
)


def node_facts(
    node: NodeView | Mapping[str, Any],
    table: AcceleratorTable,
    staleness_seconds: float,
    now: datetime | None = None,
) -> NodeFacts:
    """The facts of one node object, read by `NODE_STEPS` in order. Never raises on odd labels or
    annotations: what cannot be read is skipped (with a note where a user would want to know). `node` is
    the object as listed (its dict, or a view of it); it is only read."""
    view = node if isinstance(node, NodeView) else NodeView(node)
    reading = start_reading(view, table, staleness_seconds, now)
    for _name, step in NODE_STEPS:
        step(reading)
    return NodeFacts(
        name=reading.name,
        labels=reading.labels,
        accelerator_type=reading.type_id,
        type_source=reading.source,
        gpu_count=reading.gpu_count,
        gpu_memory_mib=reading.memory_mib,
        product=reading.product,
        allocatable=reading.allocatable,
        taints=_taints(view),
        unschedulable=view.unschedulable,
        mig_strategy=reading.mig_strategy,
        mig_ready=reading.mig_ready,
        mig_profiles=reading.mig_profiles,
        sharing=reading.sharing,
        replicas=reading.replicas,
        nvlink_domain_size=reading.nvlink_domain_size,
        clique=reading.clique,
        clique_label=reading.clique_label,
        topology=reading.topology,
        topology_age_seconds=reading.age,
        topology_stale=reading.stale,
        notes=reading.notes,
    )
