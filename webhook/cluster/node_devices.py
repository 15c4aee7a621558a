"""A node's DRA devices as the cluster model holds them (`NodeFacts.dra`): each GPU and MIG device its
ResourceSlices publish, and how much of them allocated ResourceClaims hold. The vocabulary the core reads;
the DRA wing reads the slices and claims into it (webhook/dra/facts.py, a fact reader of the model).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from webhook.cluster.device_model import (
    CapacityPolicy,
    CounterKey,
    Counters,
    DeviceTaint,
    blocked,
    copy_counters,
    fits,
    take,
)

Tolerations = Sequence[Mapping[str, Any]]


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
