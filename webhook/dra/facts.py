"""DRA devices as cluster facts: ResourceSlices, DeviceClasses and allocated ResourceClaims.

NVIDIA's GPU DRA driver (`gpu.nvidia.com`) publishes one ResourceSlice per node and pool; each device
has typed attributes (`{"string": ...}`, `{"int": ...}`, `{"bool": ...}`, `{"version": ...}`) and
capacities (`{"value": quantity}`). A whole GPU has `type: gpu`, `productName`, `uuid`, capacity
`memory`; a MIG device has `type: mig`, `profile` (e.g. `1g.10gb`), `parentUUID`. Allocated devices
are named in ResourceClaims' `status.allocation.devices.results[]` by driver, pool and device.

Kubernetes 1.36 adds what decides whether a device can be allocated (webhook/dra/device_model.py):
device taints, partitionable devices (NVIDIA's dynamic MIG: every possible MIG placement published, all
consuming counters of their GPU's counter set, which may sit in a slice of its own) and consumable
capacity (a GPU allocated to several claims, each taking a share of its `memory` or `shares`). Devices
of other drivers are read for one attribute only, `resource.kubernetes.io/pcieRoot` (a NIC beside a GPU).

Everything here is pure and bounded: slices come from the API or a YAML directory that pod creators
do not write, but a slice is still read defensively (at most `MAX_DEVICES_PER_SLICE` devices, strings
capped), because a broken driver must not break admission.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from decimal import Decimal
from typing import Any

from policies.vocabulary.accelerator_types import MIXED, AcceleratorTable
from policies.vocabulary.quantities import MIB, parse_quantity
from webhook.cluster.node_facts import NodeFacts
from webhook.dra.device_model import (
    CapacityPolicy,
    CounterKey,
    Counters,
    DeviceTaint,
    blocked,
    consumed_capacity,
    copy_counters,
    fits,
    read_capacities,
    read_consumption,
    read_counter_sets,
    read_taints,
    take,
)

NVIDIA_DRIVER = "gpu.nvidia.com"
MAX_DEVICES_PER_SLICE = 128  # the API's own limit for one ResourceSlice
MAX_TEXT = 256
# The standard attribute of a device's PCIe root complex (KEP-5316), published by NVIDIA's GPU driver and
# by NIC drivers such as DRANET (`dra.net`): a claim's `matchAttribute` on it keeps a GPU and a NIC together.
PCIE_ROOT = "resource.kubernetes.io/pcieRoot"
Tolerations = Sequence[Mapping[str, Any]]
# How the node view and availability name DRA devices (by DeviceClass).
DRA_GPUS = "gpu.nvidia.com"
DRA_MIG_PREFIX = "mig.nvidia.com/"


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
    taints: tuple[DeviceTaint, ...] = ()
    # Partitionable devices: what the device takes of its pool's counter sets when allocated.
    consumes: tuple[tuple[str, tuple[tuple[str, Decimal], ...]], ...] = ()
    # Consumable capacity: the device may be allocated to several requests, each taking a share of these.
    capacities: tuple[tuple[str, CapacityPolicy], ...] = ()
    pcie_root: str | None = None

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.driver, self.pool, self.name)

    @property
    def shared(self) -> bool:
        """Whether the device allows multiple allocations (consumable capacity)."""
        return bool(self.capacities)

    def capacity_policy(self, name: str) -> CapacityPolicy | None:
        return next((policy for key, policy in self.capacities if key in (name, f"{self.driver}/{name}")), None)

    def blocked_by(self, tolerations: Tolerations = ()) -> list[DeviceTaint]:
        """The taints that keep this device from a request with these tolerations."""
        return blocked(self.taints, tolerations)


@dataclass
class DraNodeDevices:
    """What one node publishes through DRA, and how much of it is allocated.

    Counts honour the 1.36 device model: a device tainted `NoSchedule`/`NoExecute` is not free (unless the
    tolerations given tolerate it), a partition is free only while its counters are left after the
    allocated devices took theirs, and a shared device is free as a whole GPU only while no share of it is
    allocated."""

    gpus: list[DraDevice] = field(default_factory=list)
    mig: list[DraDevice] = field(default_factory=list)
    allocated: set[tuple[str, str, str]] = field(default_factory=set)
    # Partitionable devices: (pool, counter set) -> counter -> value, from the node's slices.
    counters: dict[CounterKey, Counters] = field(default_factory=dict)
    # Consumable capacity: device -> capacity -> what its allocated shares consume together.
    consumed: dict[tuple[str, str, str], dict[str, Decimal]] = field(default_factory=dict)
    # PCIe roots of the node's devices of other drivers (NICs): driver -> root -> devices.
    pcie_roots: dict[str, dict[str, int]] = field(default_factory=dict)

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

    # -- the 1.36 device model: taints, counters, shares -------------------------------------------
    def counters_left(self) -> dict[CounterKey, Counters]:
        """Each counter set's counters less what the allocated devices consume."""
        left = copy_counters(self.counters)
        for device in (*self.gpus, *self.mig):
            if device.key in self.allocated:
                take(device.consumes, device.pool, left)
        return left

    def _most(self, devices: Iterable[DraDevice], left: dict[CounterKey, Counters]) -> int:
        """How many of `devices` can be allocated together within `left` (first come, in name order:
        placements of one profile do not overlap, so this is the most of one profile)."""
        count = 0
        for device in sorted(devices, key=lambda d: d.key):
            if fits(device.consumes, device.pool, left):
                take(device.consumes, device.pool, left)
                count += 1
        return count

    def _profiles(self) -> dict[str, list[DraDevice]]:
        by_profile: dict[str, list[DraDevice]] = {}
        for device in self.mig:
            if device.profile:
                by_profile.setdefault(device.profile, []).append(device)
        return by_profile

    def mig_capacity(self) -> dict[str, int]:
        """The most slices of each profile the node can hold at once (each profile alone): its devices,
        or with partitionable devices as many placements as the counters allow."""
        return {profile: self._most(devices, copy_counters(self.counters))
                for profile, devices in sorted(self._profiles().items())}

    def usable(self, device: DraDevice, tolerations: Tolerations = ()) -> bool:
        """Not allocated (a shared device: no share of it allocated) and not tainted against these tolerations."""
        return device.key not in self.allocated and not device.blocked_by(tolerations)

    def free_gpus(self, tolerations: Tolerations = ()) -> int:
        """Whole GPUs that can be allocated now: usable, and with their counters left (no partition of
        them allocated)."""
        left = self.counters_left()
        return self._most((d for d in self.gpus if self.usable(d, tolerations)), left)

    def free_mig(self, tolerations: Tolerations = ()) -> dict[str, int]:
        """Slices of each profile that can be allocated now (each profile alone)."""
        left = self.counters_left()
        return {profile: self._most((d for d in devices if self.usable(d, tolerations)), copy_counters(left))
                for profile, devices in sorted(self._profiles().items())}

    def mig_most(self) -> int:
        """The most MIG devices the node can hold at once (smallest first where they share counters)."""
        return self._most_at_once(self.mig)

    def most_at_once(self) -> int:
        """The most GPU and MIG devices the node can hold at once (what `allocationMode: All` can take):
        every device, except partitions whose counters smaller devices took first."""
        return self._most_at_once([*self.gpus, *self.mig])

    def _most_at_once(self, devices: Iterable[DraDevice]) -> int:
        def size(device: DraDevice) -> tuple[Decimal, tuple[str, str, str]]:
            return sum((a for _s, amounts in device.consumes for _n, a in amounts), Decimal(0)), device.key
        left = copy_counters(self.counters)
        count = 0
        for device in sorted(devices, key=size):
            if fits(device.consumes, device.pool, left):
                take(device.consumes, device.pool, left)
                count += 1
        return count

    def tainted(self) -> list[DraDevice]:
        """Devices with a taint that keeps them from requests that do not tolerate it."""
        return [d for d in (*self.gpus, *self.mig) if d.blocked_by()]

    def untainted_gpus(self) -> int:
        return sum(1 for d in self.gpus if not d.blocked_by())

    def untainted_mig(self) -> dict[str, int]:
        return {profile: self._most((d for d in devices if not d.blocked_by()), copy_counters(self.counters))
                for profile, devices in sorted(self._profiles().items())}

    def shared_gpus(self) -> list[DraDevice]:
        """GPUs that allow multiple allocations (consumable capacity)."""
        return [d for d in self.gpus if d.shared]

    def capacity_left(self, device: DraDevice, name: str) -> Decimal | None:
        """What is left of one consumable capacity of a shared device after its allocated shares."""
        policy = device.capacity_policy(name)
        if policy is None:
            return None
        used = self.consumed.get(device.key, {})
        taken = next((v for k, v in used.items() if k in (name, f"{device.driver}/{name}")), Decimal(0))
        return policy.value - taken


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
