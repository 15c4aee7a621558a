"""DeviceClasses as the core reads them: a node's DRA devices by class, as the node view and availability show
them beside extended resources (`gpu.nvidia.com` whole GPUs, `mig.nvidia.com/<profile>`), and the extended
resource names a DeviceClass serves (a pod may ask DRA devices as `deviceclass.resource.kubernetes.io/<class>`
or a class's `extendedResourceName`): what quotas, workloads and the DRA wing all read of a pod's asks."""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from policies.gpu_demand import GPU_PREFIXES
from policies.vocabulary.objects import PodView, pod_view
from webhook.cluster.node_facts import NodeFacts

DRA_GPUS = "gpu.nvidia.com"
DRA_MIG_PREFIX = "mig.nvidia.com/"


def dra_allocatable(facts: NodeFacts) -> dict[str, Decimal]:
    """The node's DRA devices by DeviceClass, as the node view shows them beside extended resources:
    `gpu.nvidia.com` (whole GPUs) and `mig.nvidia.com/<profile>` (the most slices of the profile at once),
    tainted devices left out."""
    if facts.dra is None:
        return {}
    out: dict[str, Decimal] = {}
    if facts.dra.gpus:
        out[DRA_GPUS] = Decimal(facts.dra.untainted_gpus())
    for profile, count in facts.dra.untainted_mig().items():
        out[DRA_MIG_PREFIX + profile] = Decimal(count)
    return out


def dra_used(facts: NodeFacts) -> dict[str, Decimal]:
    """What of `dra_allocatable` cannot be allocated now: held by allocated ResourceClaims, a shared GPU
    with shares allocated, or partitions whose counters allocated devices took."""
    if facts.dra is None:
        return {}
    allocatable = dra_allocatable(facts)
    free: dict[str, int] = {DRA_GPUS: facts.dra.free_gpus()} if facts.dra.gpus else {}
    free.update({DRA_MIG_PREFIX + p: n for p, n in facts.dra.free_mig().items()})
    out: dict[str, Decimal] = {}
    for key, total in allocatable.items():
        used = max(Decimal(0), total - free.get(key, 0))
        if used:
            out[key] = used
    return out


IMPLICIT_PREFIX = "deviceclass.resource.kubernetes.io/"


def mapped_resources(device_classes: Mapping[str, Mapping[str, Any]]) -> dict[str, str]:
    """Extended resource name -> the DeviceClass that serves it (`spec.extendedResourceName`), except the
    names KGWE counts as GPU resources itself (`nvidia.com/gpu` served by DRA is still `nvidia.com/gpu`)."""
    mapped: dict[str, str] = {}
    for name, device_class in sorted(device_classes.items()):
        spec = device_class.get("spec")
        resource = spec.get("extendedResourceName") if isinstance(spec, dict) else None
        if isinstance(resource, str) and resource and not resource.startswith(GPU_PREFIXES):
            mapped[resource] = name
    return mapped


def charged_through_claims(pod: dict[str, Any], mapped: Mapping[str, str]) -> bool:
    """Whether a pod asks DRA devices of its own: ResourceClaims, or devices as extended resources (what the
    DRA wing's claim charges charge it for, webhook/dra/charges.py)."""
    spec = pod.get("spec")
    return isinstance(spec, dict) and bool(spec.get("resourceClaims") or asks_extended_devices(pod, mapped))


def asks_extended_devices(pod: PodView | Mapping[str, Any], mapped: Mapping[str, str] | None = None) -> bool:
    """Whether a container or init container asks for `deviceclass.resource.kubernetes.io/...` or a name
    of `mapped` (`mapped_resources`). Without `mapped`, needs no snapshot: for deciding that an error
    must refuse the pod."""
    return any(
        isinstance(name, str) and (name.startswith(IMPLICIT_PREFIX) or (mapped is not None and name in mapped))
        for container in pod_view(pod).all_containers
        for amounts in container.amounts()
        for name in amounts
    )
