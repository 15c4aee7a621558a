"""Which GPU vendor a pod asks for, and which accelerator types can serve it.

A pod asks for NVIDIA GPUs with `nvidia.com/*` resources and for AMD GPUs with `amd.com/gpu`; the two
are not interchangeable (the container image is built for CUDA or for ROCm). A pod that asks for one
vendor's GPUs runs only on that vendor's types, and naming the other vendor's type is refused.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from policies.vocabulary.accelerator_types import AcceleratorTable
from policies.vocabulary.objects import PodView, container_amounts, pod_view

RESOURCE_VENDORS = (("nvidia.com/", "nvidia"), ("amd.com/gpu", "amd"))
_VENDOR_PREFIXES = tuple(prefix for prefix, _vendor in RESOURCE_VENDORS)


def pod_gpu_vendors(pod: PodView | Mapping[str, Any]) -> set[str]:
    """Vendors whose GPU resources any container (init containers too) of the pod asks for."""
    # Walks the raw containers with the views' tolerant reader (no ContainerView each): every GPU pod's
    # plan reads this.
    spec = pod_view(pod).spec
    vendors: set[str] = set()
    for part in ("containers", "initContainers"):
        containers = spec.get(part)
        for container in containers if isinstance(containers, list) else ():
            if not isinstance(container, dict):
                continue
            for values in container_amounts(container):
                for key in values:
                    # One test skips the resources of no vendor (cpu, memory), most of them.
                    if isinstance(key, str) and key.startswith(_VENDOR_PREFIXES):
                        for prefix, vendor in RESOURCE_VENDORS:
                            if key.startswith(prefix):
                                vendors.add(vendor)
    return vendors


def type_vendor(table: AcceleratorTable, type_id: str) -> str:
    accel = table.get(type_id)
    return accel.vendor if accel is not None else type_id.split("-", 1)[0]


def restrict_to_vendor(
    pod: PodView | Mapping[str, Any], candidates: list[str], table: AcceleratorTable, explicit: bool
) -> tuple[list[str], str | None]:
    """The candidates of the vendor the pod's resources ask for, and a refusal when none is left.

    A pod that asks for no vendor's resource (intent only) or for both keeps every candidate.
    """
    vendors = pod_gpu_vendors(pod)
    if len(vendors) != 1:
        if len(vendors) > 1:
            return [], "the pod asks for both NVIDIA (nvidia.com/) and AMD (amd.com/gpu) GPUs: one vendor per pod"
        return candidates, None
    vendor = next(iter(vendors))
    kept = [t for t in candidates if type_vendor(table, t) == vendor]
    if kept or not candidates:
        return kept, None
    resource = "amd.com/gpu" if vendor == "amd" else "nvidia.com/gpu"
    if explicit:
        return [], (
            f"{', '.join(candidates)}: not a {vendor.upper()} GPU, and the pod asks for {resource}; "
            "ask for the resource of the type's vendor"
        )
    return [], f"the pod asks for {resource} and this cluster has no {vendor.upper()} GPUs"
