"""What Kueue needs to count GPUs that nodes publish through DRA: its `resources.deviceClassMappings`
(Kueue Configuration `config.kueue.x-k8s.io/v1beta2`) and each type's DRA capacity under those names.

A pod KGWE renders for DRA asks for no `nvidia.com/gpu`: its GPUs are requests of a ResourceClaimTemplate
naming a DeviceClass. Kueue counts such a request only when the DeviceClass is mapped to a quota
resource, and keeps a workload naming an unmapped class inadmissible, so every class KGWE's templates
name gets a mapping: whole GPUs, MIG slices (any profile: a DRA claim lists several profiles in
`firstAvailable`, so it cannot be charged to one), and the IMEX channel of a ComputeDomain.

The quota names are KGWE's own (`kgwe.io/dra-*`) rather than `nvidia.com/gpu`, so a Kueue quota never
adds device-plugin GPUs and DRA devices under one name by accident; a type's nodes are one or the
other, so its flavor's quota is in one of them.
"""

from __future__ import annotations

from typing import Any

from webhook.cluster.model import ClusterModel
from webhook.wing_config import DraConfig

KUEUE_CONFIG_API = "config.kueue.x-k8s.io/v1beta2"
KUEUE_DRA_GPUS = "kgwe.io/dra-gpu"
KUEUE_DRA_MIG = "kgwe.io/dra-mig"
KUEUE_DRA_CHANNELS = "kgwe.io/dra-imex-channel"
# The channel DeviceClass NVIDIA's driver installs and names in the ComputeDomain's channel template.
CHANNEL_CLASS = "compute-domain-default-channel.nvidia.com"


def dra_capacity(model: ClusterModel, nodes: list[str]) -> dict[str, int]:
    """DRA devices of these nodes by Kueue quota name (none when no node publishes GPUs through DRA)."""
    capacity: dict[str, int] = {}
    for name in nodes:
        dra = model.nodes[name].dra
        if dra is None:
            continue
        if dra.gpus:
            capacity[KUEUE_DRA_GPUS] = capacity.get(KUEUE_DRA_GPUS, 0) + len(dra.gpus)
            # One IMEX channel per pod on a node of a clique: as many as the node's GPUs bounds what a
            # gang can hold there, which is what a quota on channels should bound.
            if model.nodes[name].clique and CHANNEL_CLASS in model.device_classes:
                capacity[KUEUE_DRA_CHANNELS] = capacity.get(KUEUE_DRA_CHANNELS, 0) + len(dra.gpus)
        slices = dra.mig_most()  # partitions of one GPU share its counters: never all at once
        if slices:
            capacity[KUEUE_DRA_MIG] = capacity.get(KUEUE_DRA_MIG, 0) + slices
    return capacity


def device_class_mappings(model: ClusterModel, dra: DraConfig) -> list[dict[str, Any]]:
    """Kueue's deviceClassMappings for the classes KGWE's templates name, when any node uses DRA."""
    if not any(f.dra is not None and (f.dra.gpus or f.dra.mig) for f in model.nodes.values()):
        return []
    mappings = [
        {"name": KUEUE_DRA_GPUS, "deviceClassNames": [dra.gpu_device_class]},
        {"name": KUEUE_DRA_MIG, "deviceClassNames": [dra.mig_device_class]},
    ]
    if CHANNEL_CLASS in model.device_classes:
        mappings.append({"name": KUEUE_DRA_CHANNELS, "deviceClassNames": [CHANNEL_CLASS]})
    return mappings


def kueue_configuration(mappings: list[dict[str, Any]]) -> dict[str, Any]:
    """The part of Kueue's Configuration (the kueue-manager-config ConfigMap) to merge in."""
    return {"apiVersion": KUEUE_CONFIG_API, "kind": "Configuration", "resources": {"deviceClassMappings": mappings}}
