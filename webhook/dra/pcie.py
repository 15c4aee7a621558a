"""`kgwe.io/topology: pcie`: each of a container's GPUs beside a NIC under one PCIe root.

Drivers publish the standard attribute `resource.kubernetes.io/pcieRoot` on their devices (NVIDIA's GPU
driver on GPUs and MIG devices, a NIC driver such as DRANET on NICs); a claim's constraint
`matchAttribute: resource.kubernetes.io/pcieRoot` over a GPU request and a NIC request keeps both under
one root (GPUDirect RDMA without crossing the CPU's interconnect). KGWE writes one GPU request and one NIC
request per GPU (webhook/dra/render.py); here it checks, before writing them, that some node could
satisfy the claim, and refuses clearly when none could:

- the NIC DeviceClass (`dra.nicDeviceClass`, default `dranet`) must exist;
- the GPUs of the pod's types must publish `resource.kubernetes.io/pcieRoot`;
- some node must have, for the most GPUs one container asks, as many roots-worth of (GPU, NIC) pairs:
  per root, the smaller of its GPUs of the type and its NICs. A NIC is a device of the driver the class
  pins (`device.driver == "..."` in its selectors), else of any driver but the GPU driver.
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from policies.gpu_demand import GPU, MIG_PREFIX, container_gpu_amounts
from policies.vocabulary import keys
from policies.vocabulary.objects import PodView
from webhook.cluster.model import ClusterModel
from webhook.cluster.node_devices import DraDevice, DraNodeDevices
from webhook.dra.facts import PCIE_ROOT
from webhook.dra.gpu_classes import pinned_driver
from webhook.dra.render import MAX_ALIGNED_GPUS
from webhook.wing_config import DraConfig

SAMPLE_NODES = 64
PREFIX = f"{keys.TOPOLOGY} pcie"  # how refusals begin


def nic_driver(device_classes: Mapping[str, Mapping[str, Any]], name: str) -> str | None:
    """The driver the NIC class pins its devices to, if its selectors say so plainly."""
    spec = (device_classes.get(name) or {}).get("spec")
    selectors = spec.get("selectors") if isinstance(spec, dict) else None
    for selector in selectors if isinstance(selectors, list) else []:
        cel = selector.get("cel") if isinstance(selector, dict) else None
        expression = cel.get("expression") if isinstance(cel, dict) else None
        driver = pinned_driver(expression) if isinstance(expression, str) else None
        if driver is not None:
            return driver
    return None


def _devices(dra: DraNodeDevices, type_id: str, mig_profiles: list[str], share: bool) -> list[DraDevice]:
    if mig_profiles:
        return [d for d in dra.mig if d.type_id == type_id and d.profile in mig_profiles]
    gpus = dra.shared_gpus() if share else dra.gpus
    return [d for d in gpus if d.type_id == type_id]


def pairs(dra: DraNodeDevices, devices: list[DraDevice], driver: str | None) -> int:
    """How many (GPU, NIC) pairs under one root the node has for these GPU devices."""
    gpus: dict[str, int] = {}
    for device in devices:
        if device.pcie_root:
            gpus[device.pcie_root] = gpus.get(device.pcie_root, 0) + 1
    nics: dict[str, int] = {}
    for name, roots in dra.pcie_roots.items():
        if driver is None or name == driver:
            for root, count in roots.items():
                nics[root] = nics.get(root, 0) + count
    return sum(min(count, nics.get(root, 0)) for root, count in gpus.items())


def most_gpus_per_container(pod: PodView | Mapping[str, Any]) -> int:
    most = 0
    for amounts in container_gpu_amounts(pod).values():
        devices = sum((v for k, v in amounts.items() if k == GPU or k.startswith(MIG_PREFIX)), Decimal(0))
        most = max(most, int(devices))
    return most


def aligned_types(
    model: ClusterModel, config: DraConfig, types: list[str], mig_profiles: list[str], share: bool,
    pod: PodView | Mapping[str, Any],
) -> tuple[list[str], str | None]:
    """The types (in order) with a node that can hold a container's GPUs each beside a NIC under one PCIe
    root, or a refusal saying what is missing."""
    nic_class = config.nic_device_class
    if nic_class not in model.device_classes:
        have = ", ".join(sorted(model.device_classes)) or "none"
        return [], (f"{PREFIX}: the NIC DeviceClass {nic_class} (dra.nicDeviceClass) does not exist; "
                    f"this cluster has {have}")
    needed = most_gpus_per_container(pod)
    if needed > MAX_ALIGNED_GPUS:
        return [], (f"{PREFIX}: a container asks for {needed} GPUs; a claim holds at most {MAX_ALIGNED_GPUS} "
                    "GPUs each beside a NIC (32 requests)")
    driver = nic_driver(model.device_classes, nic_class)
    rooted: list[str] = []
    kept: list[str] = []
    most = 0
    for type_id in types:
        for name in model.types[type_id].dra_nodes[:SAMPLE_NODES]:
            dra = model.nodes[name].dra
            if dra is None:
                continue
            devices = _devices(dra, type_id, mig_profiles, share)
            if any(d.pcie_root for d in devices) and type_id not in rooted:
                rooted.append(type_id)
            found = pairs(dra, devices, driver)
            most = max(most, found)
            if found >= needed and type_id not in kept:
                kept.append(type_id)
    if kept:
        return kept, None
    scope = "/".join(types) or "GPU"
    if not rooted:
        return [], f"{PREFIX}: no {scope} DRA device publishes {PCIE_ROOT}, so no claim can keep it beside a NIC"
    nics = f"{nic_class} NICs" + (f" (driver {driver})" if driver else "")
    return [], (f"{PREFIX}: this pod asks for {needed} GPUs each beside a NIC under one PCIe root; the most any "
                f"{'/'.join(rooted)} node has is {most} ({nics} publishing {PCIE_ROOT} beside its GPUs)")
