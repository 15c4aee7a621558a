"""NVLink domain-size inference: how many of a node's GPUs share one NVLink domain, and which multi-node
NVLink clique (GB200 NVL72 and the like) the node belongs to.

Sources, best first: the agent's fresh topology document, the agent's `kgwe.io/nvlink-domain-size`
label (not while its topology is stale), then inference from the board: without the agent, an NVSwitch
SXM board is all-to-all (every GPU in one domain) and a PCIe card is alone (a domain of 1). MIG slices
never use NVLink, so a node whose GPUs are all partitioned has no domain to offer. The placement side
is webhook/placement/nvlink.py.
"""

from __future__ import annotations

from policies.vocabulary import keys
from policies.vocabulary.accelerator_types import AcceleratorTable
from policies.vocabulary.topology_schema import LABEL_NVLINK_CLIQUE, LABEL_NVLINK_DOMAIN_SIZE
from webhook.cluster.node_reading import NodeReading, int_label

# Product-name marks of boards whose GPUs sit on an NVSwitch (SXM and HBM modules, Grace Blackwell).
NVSWITCH_BOARD_MARKS = ("SXM", "HBM", "GB200")


def inferred_domain_size(
    table: AcceleratorTable, type_id: str, product: str | None, gpu_count: int, partitioned: bool
) -> int:
    """The NVLink domain size of a node the agent has not described: all its GPUs on an NVSwitch SXM
    board of a type the table marks NVSwitched (unless MIG-partitioned), else 1 per GPU (0 without)."""
    accel = table.get(type_id)
    board = (product or "").upper()
    sxm = any(mark in board for mark in NVSWITCH_BOARD_MARKS)
    nvswitched = accel is not None and accel.nvswitch and sxm and not partitioned
    return gpu_count if nvswitched else (1 if gpu_count else 0)


def nvlink_domain(reading: NodeReading) -> None:
    """The nvlink-domain step: the domain size, and the clique with the label key that carries it."""
    labels, fresh = reading.labels, reading.fresh
    size = int_label(labels.get(LABEL_NVLINK_DOMAIN_SIZE)) if not reading.stale else None
    if fresh is not None and fresh.nvlink.domain_size:
        size = fresh.nvlink.domain_size
    if size is None:
        partitioned = reading.mig_strategy in ("single", "gke") and bool(
            reading.single_profile or labels.get(keys.GKE_GPU_PARTITION_SIZE)
        )
        size = inferred_domain_size(reading.table, reading.type_id, reading.product, reading.gpu_count, partitioned)
    reading.nvlink_domain_size = size
    if labels.get(LABEL_NVLINK_CLIQUE) and not reading.stale:
        reading.clique, reading.clique_label = labels[LABEL_NVLINK_CLIQUE], LABEL_NVLINK_CLIQUE
    elif labels.get(keys.NVIDIA_GPU_CLIQUE):
        reading.clique, reading.clique_label = labels[keys.NVIDIA_GPU_CLIQUE], keys.NVIDIA_GPU_CLIQUE
    if fresh is not None and fresh.fabric is not None and reading.clique is None:
        reading.clique = fresh.fabric.clique
