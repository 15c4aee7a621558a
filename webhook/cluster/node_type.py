"""Which accelerator type a node's GPUs are, and which source said so.

Sources, best first: the agent's fresh `kgwe.io/topology` document, the agent's `kgwe.io/accelerator-type`
label (unless its topology is stale), NVIDIA GFD's product and memory labels, AMD's node labeller, then
GKE, Karpenter and AKS labels; each is mapped through the accelerator table (its aliases). A node with
GPUs but none of these is `unknown` (webhook/cluster/node_gpus.py).
"""

from __future__ import annotations

from policies.vocabulary import keys, resources
from policies.vocabulary.product_names import split_product
from policies.vocabulary.topology_schema import LABEL_ACCELERATOR_TYPE
from webhook.cluster.amd import amd_labels
from webhook.cluster.node_reading import NodeReading, int_label


def gfd_labels(reading: NodeReading) -> None:
    """The gfd-labels step: GFD's product and memory, and the MIG strategy (the resources say mixed even
    where the strategy label is missing); under MIG single the product names the slice profile."""
    labels = reading.labels
    reading.product = labels.get(keys.NVIDIA_GPU_PRODUCT)
    reading.memory_mib = int_label(labels.get(keys.NVIDIA_GPU_MEMORY))
    mig_strategy = labels.get(keys.NVIDIA_MIG_STRATEGY, "none")
    if mig_strategy == "none" and any(
        k.startswith(resources.NVIDIA_MIG_PREFIX) and v > 0 for k, v in reading.allocatable.items()
    ):
        # Hand-made or older labelling: MIG resources without the strategy label.
        mig_strategy = "mixed"
    reading.mig_strategy = mig_strategy
    if reading.product:
        reading.base_product, reading.single_profile, _shared = split_product(reading.product)


def accelerator_type(reading: NodeReading) -> None:
    """The accelerator-type step: the type id and its source, from the best source the node has."""
    labels, table, fresh = reading.labels, reading.table, reading.fresh
    if fresh is not None and fresh.gpus:
        reading.type_id, reading.source = fresh.accelerator_type, "topology"
    elif labels.get(LABEL_ACCELERATOR_TYPE) and not reading.stale:
        reading.type_id, reading.source = labels[LABEL_ACCELERATOR_TYPE], "agent-label"
    elif reading.product:
        # Under MIG single the memory label is the slice's, not the GPU's: the table knows the model.
        memory = None if reading.single_profile else reading.memory_mib
        reading.type_id = table.from_product(reading.base_product, memory)
        reading.source = "gfd"
    elif (amd := amd_labels(labels)).present:
        reading.type_id, reading.source = table.from_amd(amd.product, amd.device_id, amd.vram_gb), "amd-labeller"
        reading.product = amd.product
        reading.memory_mib = amd.vram_gb * 1024 if amd.vram_gb else None
    elif labels.get(keys.GKE_ACCELERATOR):
        reading.type_id, reading.source = table.from_gke(labels[keys.GKE_ACCELERATOR]), "gke"
    elif labels.get(keys.KARPENTER_GPU_NAME):
        reading.type_id = table.from_karpenter(
            labels[keys.KARPENTER_GPU_NAME], int_label(labels.get(keys.KARPENTER_GPU_MEMORY))
        )
        reading.source = "karpenter"
    elif labels.get(keys.AKS_ACCELERATOR) and labels.get(keys.INSTANCE_TYPE):
        reading.type_id, reading.source = table.from_azure_instance(labels[keys.INSTANCE_TYPE]), "aks"
