"""A node's MIG devices per profile, by the strategy it exposes them with (mixed: one resource per
profile; single: every GPU one profile, named by the product label; GKE: the partition-size label),
and whether the MIG manager has settled (`nvidia.com/mig.config.state`)."""

from __future__ import annotations

from policies.vocabulary import keys, resources
from webhook.cluster.node_reading import NodeReading, int_label

MIG_RESOURCE_PREFIX = resources.NVIDIA_MIG_PREFIX
# GFD's per-profile count labels under the mixed strategy: nvidia.com/mig-<profile>.count.
MIG_COUNT_LABEL_PREFIX, MIG_COUNT_LABEL_SUFFIX = "nvidia.com/mig-", ".count"


def mig(reading: NodeReading) -> None:
    """The mig step: devices per profile (allocatable first, then GFD's count labels) and readiness."""
    labels, allocatable = reading.labels, reading.allocatable
    profiles: dict[str, int] = {}
    if reading.mig_strategy == "mixed":
        for key, value in allocatable.items():
            if key.startswith(MIG_RESOURCE_PREFIX) and value > 0:
                profiles[key[len(MIG_RESOURCE_PREFIX) :]] = int(value)
        for key, label_value in labels.items():
            if key.startswith(MIG_COUNT_LABEL_PREFIX) and key.endswith(MIG_COUNT_LABEL_SUFFIX):
                profile = key[len(MIG_COUNT_LABEL_PREFIX) : -len(MIG_COUNT_LABEL_SUFFIX)]
                profiles.setdefault(profile, int_label(label_value) or 0)
    elif reading.mig_strategy == "single" and reading.single_profile:
        profiles[reading.single_profile] = int_label(labels.get(keys.NVIDIA_GPU_COUNT)) or int(
            allocatable.get(resources.NVIDIA_GPU, 0)
        )
    elif labels.get(keys.GKE_GPU_PARTITION_SIZE):
        reading.mig_strategy = "gke"
        profiles[labels[keys.GKE_GPU_PARTITION_SIZE]] = int(allocatable.get(resources.NVIDIA_GPU, 0))
    state = labels.get(keys.NVIDIA_MIG_CONFIG_STATE)
    reading.mig_ready = state in (None, "success")
    if profiles and not reading.mig_ready:
        reading.notes.append(f"MIG configuration state is {state!r}: no MIG placement here")
    reading.mig_profiles = profiles
