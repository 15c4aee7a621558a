"""How many physical GPUs a node has (never MIG devices or sharing replicas), and whether a node with
GPUs but no type source is `unknown`."""

from __future__ import annotations

from decimal import Decimal

from policies.vocabulary import keys, resources
from policies.vocabulary.accelerator_types import UNKNOWN
from webhook.cluster.node_reading import NodeReading, int_label


def gpu_count(reading: NodeReading) -> None:
    """The gpu-count step: the topology document's GPUs, else the count labels, else the allocatable
    GPUs divided by the sharing replicas."""
    labels, fresh, allocatable = reading.labels, reading.fresh, reading.allocatable
    count = 0
    if fresh is not None and fresh.gpus:
        count = len(fresh.gpus)
    elif reading.mig_strategy == "single" and labels.get(keys.NVIDIA_GPU_COUNT):
        # Under MIG single gpu.count counts MIG devices, not GPUs: devices / instances per GPU of the
        # profile gives the physical GPUs (a pod's whole-GPU count is judged against those).
        devices = int_label(labels.get(keys.NVIDIA_GPU_COUNT)) or 0
        accel = reading.table.get(reading.type_id)
        profile = reading.single_profile
        slice_profile = accel.mig_profile(profile) if accel is not None and profile else None
        count = -(-devices // slice_profile.max_instances) if slice_profile is not None else devices
    else:
        count = (
            int_label(labels.get(keys.NVIDIA_GPU_COUNT))
            or int_label(labels.get(keys.GKE_ACCELERATOR_COUNT))
            or int_label(labels.get(keys.KARPENTER_GPU_COUNT))
            or 0
        )
        if not count:
            whole = allocatable.get(resources.NVIDIA_GPU, Decimal(0)) or allocatable.get(resources.AMD_GPU, Decimal(0))
            count = int(whole) // max(1, reading.replicas)
    reading.gpu_count = count
    has_any_gpu = count > 0 or any(
        k.startswith(resources.GPU_RESOURCE_PREFIXES) and v > 0 for k, v in allocatable.items()
    )
    if has_any_gpu and not reading.type_id:
        reading.type_id = UNKNOWN
        reading.notes.append("GPUs without labels or topology: type unknown")
    if not has_any_gpu and reading.source == "none":
        reading.type_id = ""
