"""DRA devices as cluster facts: ResourceSlices, DeviceClasses and allocated ResourceClaims.

NVIDIA's GPU DRA driver (`gpu.nvidia.com`) publishes one ResourceSlice per node and pool; each device
has typed attributes (`{"string": ...}`, `{"int": ...}`, `{"bool": ...}`, `{"version": ...}`) and
capacities (`{"value": quantity}`). A whole GPU has `type: gpu`, `productName`, `uuid`, capacity
`memory`; a MIG device has `type: mig`, `profile` (e.g. `1g.10gb`), `parentUUID`. Allocated devices
are named in ResourceClaims' `status.allocation.devices.results[]` by driver, pool and device.

Kubernetes 1.36 adds what decides whether a device can be allocated (webhook/cluster/device_model.py):
device taints, partitionable devices (NVIDIA's dynamic MIG: every possible MIG placement published, all
consuming counters of their GPU's counter set, which may sit in a slice of its own) and consumable
capacity (a GPU allocated to several claims, each taking a share of its `memory` or `shares`). Devices
of other drivers are read for one attribute only, `resource.kubernetes.io/pcieRoot` (a NIC beside a GPU).

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
from webhook.cluster.device_model import (
    CounterKey,
    Counters,
    consumed_capacity,
    read_capacities,
    read_consumption,
    read_counter_sets,
    read_taints,
)
from webhook.cluster.fact_readers import ObjectsByKind
from webhook.cluster.node_devices import DraDevice, DraNodeDevices
from webhook.cluster.node_facts import NodeFacts

NVIDIA_DRIVER = "gpu.nvidia.com"
MAX_DEVICES_PER_SLICE = 128  # the API's own limit for one ResourceSlice
MAX_TEXT = 256
# The standard attribute of a device's PCIe root complex (KEP-5316), published by NVIDIA's GPU driver and
# by NIC drivers such as DRANET (`dra.net`): a claim's `matchAttribute` on it keeps a GPU and a NIC together.
PCIE_ROOT = "resource.kubernetes.io/pcieRoot"


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


@dataclass
class NodeSlices:
    """What one node's current ResourceSlices publish."""

    devices: list[DraDevice] = field(default_factory=list)  # NVIDIA GPU and MIG devices
    counters: dict[CounterKey, Counters] = field(default_factory=dict)  # the GPU driver's counter sets
    pcie_roots: dict[str, dict[str, int]] = field(default_factory=dict)  # other drivers' devices by root


def read_slices(slices: Iterable[dict[str, Any]], table: AcceleratorTable) -> dict[str, NodeSlices]:
    """node name -> what its ResourceSlices publish (slices without `nodeName` are not node-local)."""
    out: dict[str, NodeSlices] = {}
    for obj in _current_slices(slices):
        spec = obj["spec"]
        driver = str(spec.get("driver", ""))[:MAX_TEXT]
        node = spec.get("nodeName")
        if not isinstance(node, str) or not node:
            continue  # network-attached devices (no nodeName) are not devices KGWE places
        pool = str((spec.get("pool") or {}).get("name", ""))[:MAX_TEXT]
        devices = spec.get("devices")
        devices = devices[:MAX_DEVICES_PER_SLICE] if isinstance(devices, list) else []
        if driver != NVIDIA_DRIVER:
            _other_driver(out, node, driver, devices)
            continue
        entry = out.setdefault(node, NodeSlices())
        for name, counters in read_counter_sets(spec).items():
            entry.counters[(pool, name)] = counters
        for device in devices:
            parsed = _device(device, driver, pool, node, table)
            if parsed is not None:
                entry.devices.append(parsed)
    return out


def _other_driver(out: dict[str, NodeSlices], node: str, driver: str, devices: list[Any]) -> None:
    """Another driver's devices (NICs, say): only where their PCIe roots are."""
    for device in devices:
        root = attribute(device, PCIE_ROOT) if isinstance(device, dict) else None
        if root:
            roots = out.setdefault(node, NodeSlices()).pcie_roots.setdefault(driver, {})
            roots[root] = roots.get(root, 0) + 1


def parse_slices(slices: Iterable[dict[str, Any]], table: AcceleratorTable) -> dict[str, list[DraDevice]]:
    """node name -> NVIDIA GPU and MIG devices its ResourceSlices publish."""
    return {node: entry.devices for node, entry in read_slices(slices, table).items() if entry.devices}


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
        taints=read_taints(device),
        consumes=read_consumption(device),
        capacities=read_capacities(device),
        pcie_root=attribute(device, PCIE_ROOT),
    )


def _results(claims: Iterable[dict[str, Any]]) -> Iterable[tuple[tuple[str, str, str], dict[str, Any]]]:
    for claim in claims:
        status = claim.get("status")
        allocation = status.get("allocation") if isinstance(status, dict) else None
        devices = allocation.get("devices") if isinstance(allocation, dict) else None
        results = devices.get("results") if isinstance(devices, dict) else None
        if not isinstance(results, list):
            continue
        for result in results:
            if isinstance(result, dict) and result.get("device"):
                yield (str(result.get("driver", "")), str(result.get("pool", "")), str(result["device"])), result


def allocated_devices(claims: Iterable[dict[str, Any]]) -> set[tuple[str, str, str]]:
    """(driver, pool, device) of every device an allocated ResourceClaim holds."""
    return {key for key, _result in _results(claims)}


def consumed_shares(claims: Iterable[dict[str, Any]]) -> dict[tuple[str, str, str], dict[str, Decimal]]:
    """What the allocated shares of each shared device consume together (`consumedCapacity`, summed)."""
    out: dict[tuple[str, str, str], dict[str, Decimal]] = {}
    for key, result in _results(claims):
        for name, amount in consumed_capacity(result).items():
            device = out.setdefault(key, {})
            device[name] = device.get(name, Decimal(0)) + amount
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
    by_node = {node: entry for node, entry in read_slices(slices, table).items() if entry.devices}
    if not by_node:
        return facts
    claims = list(claims)
    allocated = allocated_devices(claims)
    shares = consumed_shares(claims)
    out = dict(facts)
    for node, entry in by_node.items():
        current = facts.get(node)
        if current is None:
            continue  # a slice for a node that does not exist (yet): nothing can run there
        devices = entry.devices
        dra = DraNodeDevices(
            gpus=[d for d in devices if d.kind == "gpu"],
            mig=[d for d in devices if d.kind == "mig"],
            counters=entry.counters,
            pcie_roots=entry.pcie_roots,
        )
        dra.allocated = {d.key for d in devices if d.key in allocated}
        dra.consumed = {d.key: shares[d.key] for d in devices if d.key in shares}
        out[node] = _folded(current, dra, table)
    return out


def read_dra_facts(
    facts: dict[str, NodeFacts], objects: ObjectsByKind, table: AcceleratorTable
) -> dict[str, NodeFacts]:
    """The DRA wing's fact reader of the cluster model (webhook/cluster/fact_readers.py)."""
    return apply_dra(facts, objects["ResourceSlice"].values(), objects["ResourceClaim"].values(), table)


# What the assembly registers in `webhook.cluster.fact_readers.FACT_READERS`.
FACT_READERS = {"dra": read_dra_facts}


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
    profiles = dra.mig_capacity()
    tainted = dra.tainted()
    notes = [f"GPUs published through DRA ({len(dra.gpus)} GPUs, {len(dra.mig)} MIG devices)"]
    by_taint: dict[str, list[str]] = {}
    for device in tainted:
        for taint in device.blocked_by():
            by_taint.setdefault(str(taint), []).append(device.name)
    for text, names in sorted(by_taint.items())[:4]:
        shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
        notes.append(f"DRA devices tainted {text} (not available unless tolerated): {shown}")
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
        notes=[*current.notes, *notes],
    )
