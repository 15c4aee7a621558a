"""DRA devices as cluster facts: ResourceSlices, DeviceClasses and allocated ResourceClaims.

NVIDIA's GPU DRA driver (`gpu.nvidia.com`) publishes one ResourceSlice per node and pool; each device
has typed attributes (`{"string": ...}`, `{"int": ...}`, `{"bool": ...}`, `{"version": ...}`) and
capacities (`{"value": quantity}`). A whole GPU has `type: gpu`, `productName`, `uuid`, capacity
`memory`; a MIG device has `type: mig`, `profile` (e.g. `1g.10gb`), `parentUUID`. Allocated devices
are named in ResourceClaims' `status.allocation.devices.results[]` by driver, pool and device.

Everything here is pure and bounded: slices come from the API or a YAML directory that pod creators
do not write, but a slice is still read defensively (at most `MAX_DEVICES_PER_SLICE` devices, strings
capped), because a broken driver must not break admission.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from decimal import Decimal
from typing import Any

from policies.vocabulary.accelerator_types import MIXED, AcceleratorTable
from policies.vocabulary.quantities import MIB, parse_quantity
from webhook.cluster.node_facts import NodeFacts

NVIDIA_DRIVER = "gpu.nvidia.com"
MAX_DEVICES_PER_SLICE = 128  # the API's own limit for one ResourceSlice
MAX_TEXT = 256


@dataclass(frozen=True)
class DraDevice:
    """One device of a ResourceSlice that KGWE understands (an NVIDIA GPU or MIG device)."""

    driver: str
    pool: str
    name: str
    node: str
    kind: str  # gpu | mig
    product: str
    type_id: str
    memory_bytes: Decimal | None
    profile: str | None
    uuid: str | None
    parent_uuid: str | None

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.driver, self.pool, self.name)


@dataclass
class DraNodeDevices:
    """What one node publishes through DRA, and how much of it is allocated."""

    gpus: list[DraDevice] = field(default_factory=list)
    mig: list[DraDevice] = field(default_factory=list)
    allocated: set[tuple[str, str, str]] = field(default_factory=set)

    @property
    def products(self) -> set[str]:
        return {d.product for d in (*self.gpus, *self.mig) if d.product}

    @property
    def physical_gpus(self) -> int:
        """Whole GPUs plus the parents of MIG devices that are not themselves published as GPUs."""
        uuids = {d.uuid for d in self.gpus if d.uuid}
        parents = {d.parent_uuid for d in self.mig if d.parent_uuid and d.parent_uuid not in uuids}
        return len(self.gpus) + len(parents)

    def mig_profiles(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for device in self.mig:
            if device.profile:
                counts[device.profile] = counts.get(device.profile, 0) + 1
        return counts

    def allocated_gpus(self) -> int:
        return sum(1 for d in self.gpus if d.key in self.allocated)

    def allocated_mig(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for device in self.mig:
            if device.key in self.allocated and device.profile:
                counts[device.profile] = counts.get(device.profile, 0) + 1
        return counts


def _text(value: Any) -> str | None:
    return str(value)[:MAX_TEXT] if value is not None else None


def attribute(device: dict[str, Any], name: str, driver: str = NVIDIA_DRIVER) -> str | None:
    """A device attribute's value as text, whichever of string/int/bool/version it is; the name may be
    given bare (`productName`) or qualified with the driver's domain (`gpu.nvidia.com/productName`)."""
    attributes = device.get("attributes")
    if not isinstance(attributes, dict):
        return None
    raw = attributes.get(name, attributes.get(f"{driver}/{name}"))
    if not isinstance(raw, dict):
        return None
    for kind in ("string", "version", "int", "bool"):
        if kind in raw:
            return _text(raw[kind])
    return None


def capacity(device: dict[str, Any], name: str, driver: str = NVIDIA_DRIVER) -> Decimal | None:
    capacities = device.get("capacity")
    if not isinstance(capacities, dict):
        return None
    raw = capacities.get(name, capacities.get(f"{driver}/{name}"))
    if not isinstance(raw, dict) or raw.get("value") is None:
        return None
    try:
        return parse_quantity(raw["value"])
    except ValueError:
        return None


def _current_slices(slices: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Slices of each pool's newest generation only (older generations are being replaced)."""
    newest: dict[tuple[str, str], int] = {}
    kept: list[tuple[tuple[str, str], int, dict[str, Any]]] = []
    for obj in slices:
        spec = obj.get("spec")
        if not isinstance(spec, dict):
            continue
        pool: dict[str, Any] = spec["pool"] if isinstance(spec.get("pool"), dict) else {}
        key = (str(spec.get("driver", "")), str(pool.get("name", "")))
        try:
            generation = int(pool.get("generation", 0))
        except (TypeError, ValueError):
            generation = 0
        newest[key] = max(newest.get(key, generation), generation)
        kept.append((key, generation, obj))
    return [obj for key, generation, obj in kept if generation == newest[key]]


def parse_slices(slices: Iterable[dict[str, Any]], table: AcceleratorTable) -> dict[str, list[DraDevice]]:
    """node name -> NVIDIA GPU and MIG devices its ResourceSlices publish."""
    out: dict[str, list[DraDevice]] = {}
    for obj in _current_slices(slices):
        spec = obj["spec"]
        driver = str(spec.get("driver", ""))
        node = spec.get("nodeName")
        if driver != NVIDIA_DRIVER or not isinstance(node, str) or not node:
            continue  # other drivers, and network-attached devices (no nodeName), are not GPUs KGWE places
        pool = str((spec.get("pool") or {}).get("name", ""))
        devices = spec.get("devices")
        if not isinstance(devices, list):
            continue
        for device in devices[:MAX_DEVICES_PER_SLICE]:
            parsed = _device(device, driver, pool, node, table)
            if parsed is not None:
                out.setdefault(node, []).append(parsed)
    return out


def _device(device: Any, driver: str, pool: str, node: str, table: AcceleratorTable) -> DraDevice | None:
    if not isinstance(device, dict) or not device.get("name"):
        return None
    kind = (attribute(device, "type") or "").lower()
    profile = attribute(device, "profile")
    if kind not in ("gpu", "mig"):
        kind = "mig" if profile else ("gpu" if attribute(device, "productName") else "")
    if not kind:
        return None  # e.g. the driver's other device types (IMEX channels live in another driver)
    product = attribute(device, "productName") or ""
    memory = capacity(device, "memory")
    # A MIG device's memory is the slice's: the table knows the parent's model from its product name.
    memory_mib = int(memory / MIB) if memory is not None and kind == "gpu" else None
    type_id = table.from_product(product, memory_mib) if product else "unknown"
    return DraDevice(
        driver=driver,
        pool=pool,
        name=str(device["name"])[:MAX_TEXT],
        node=node,
        kind=kind,
        product=product,
        type_id=type_id,
        memory_bytes=memory,
        profile=profile if kind == "mig" else None,
        uuid=attribute(device, "uuid"),
        parent_uuid=attribute(device, "parentUUID"),
    )


def allocated_devices(claims: Iterable[dict[str, Any]]) -> set[tuple[str, str, str]]:
    """(driver, pool, device) of every device an allocated ResourceClaim holds."""
    out: set[tuple[str, str, str]] = set()
    for claim in claims:
        status = claim.get("status")
        allocation = status.get("allocation") if isinstance(status, dict) else None
        devices = allocation.get("devices") if isinstance(allocation, dict) else None
        results = devices.get("results") if isinstance(devices, dict) else None
        if not isinstance(results, list):
            continue
        for result in results:
            if isinstance(result, dict) and result.get("device"):
                out.add((str(result.get("driver", "")), str(result.get("pool", "")), str(result["device"])))
    return out


def apply_dra(
    facts: dict[str, NodeFacts],
    slices: Iterable[dict[str, Any]],
    claims: Iterable[dict[str, Any]],
    table: AcceleratorTable,
) -> dict[str, NodeFacts]:
    """Node facts with what DRA publishes folded in. A node whose GPUs are known only from its
    ResourceSlices gets its type, GPU count, memory and MIG devices from them (`type_source` `dra`,
    MIG strategy `dra`); a node also typed by labels keeps those and gains the DRA devices beside."""
    by_node = parse_slices(slices, table)
    if not by_node:
        return facts
    allocated = allocated_devices(claims)
    out = dict(facts)
    for node, devices in by_node.items():
        current = facts.get(node)
        if current is None:
            continue  # a slice for a node that does not exist (yet): nothing can run there
        dra = DraNodeDevices(
            gpus=[d for d in devices if d.kind == "gpu"],
            mig=[d for d in devices if d.kind == "mig"],
        )
        dra.allocated = {d.key for d in devices if d.key in allocated}
        out[node] = _folded(current, dra, table)
    return out


def _folded(current: NodeFacts, dra: DraNodeDevices, table: AcceleratorTable) -> NodeFacts:
    if current.is_typed and current.gpu_count:
        return replace(current, dra=dra)
    types = {d.type_id for d in (*dra.gpus, *dra.mig)}
    type_id = next(iter(types)) if len(types) == 1 else MIXED
    gpus = dra.physical_gpus
    memory = next((d.memory_bytes for d in dra.gpus if d.memory_bytes is not None), None)
    accel = table.get(type_id)
    product = next(iter(sorted(dra.products)), None)
    board = (product or "").upper()
    # Without the agent an NVSwitch SXM board is all-to-all, as for labelled nodes; MIG slices never use NVLink.
    nvswitched = accel is not None and accel.nvswitch and any(m in board for m in ("SXM", "HBM", "GB200"))
    nvlink = len(dra.gpus) if nvswitched and len(dra.gpus) > 1 else (1 if gpus else 0)
    profiles = dra.mig_profiles()
    return replace(
        current,
        accelerator_type=type_id,
        type_source="dra",
        gpu_count=gpus,
        gpu_memory_mib=int(memory / MIB) if memory is not None else current.gpu_memory_mib,
        product=product,
        mig_strategy="dra" if profiles else current.mig_strategy,
        mig_profiles=profiles or current.mig_profiles,
        nvlink_domain_size=max(current.nvlink_domain_size, nvlink) if current.gpu_count else nvlink,
        dra=dra,
        notes=[*current.notes, f"GPUs published through DRA ({len(dra.gpus)} GPUs, {len(dra.mig)} MIG devices)"],
    )


def dra_allocatable(facts: NodeFacts) -> dict[str, Decimal]:
    """The node's DRA devices by DeviceClass, as the node view shows them beside extended resources:
    `gpu.nvidia.com` (whole GPUs) and `mig.nvidia.com/<profile>`."""
    if facts.dra is None:
        return {}
    out: dict[str, Decimal] = {}
    if facts.dra.gpus:
        out["gpu.nvidia.com"] = Decimal(len(facts.dra.gpus))
    for profile, count in sorted(facts.dra.mig_profiles().items()):
        out[f"mig.nvidia.com/{profile}"] = Decimal(count)
    return out


def dra_used(facts: NodeFacts) -> dict[str, Decimal]:
    """The node's DRA devices held by allocated ResourceClaims, keyed like `dra_allocatable`."""
    if facts.dra is None:
        return {}
    out: dict[str, Decimal] = {}
    if facts.dra.allocated_gpus():
        out["gpu.nvidia.com"] = Decimal(facts.dra.allocated_gpus())
    for profile, count in sorted(facts.dra.allocated_mig().items()):
        out[f"mig.nvidia.com/{profile}"] = Decimal(count)
    return out
