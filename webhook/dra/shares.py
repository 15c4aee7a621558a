"""A share of a GPU through DRA's consumable capacity: `kgwe.io/sharing: mps` on DRA nodes.

A GPU that allows multiple allocations (`allowMultipleAllocations: true`) is allocated to several claims,
each taking `capacity.requests` of its consumable capacities. NVIDIA's driver with consumable shares
publishes `memory` (bytes, a `validRange` with a 1Mi step) and, in its integer mode, `shares` (1..N). So:

- `kgwe.io/gpu-memory` asks that much `memory`;
- `kgwe.io/gpu-fraction` asks that share of the GPU: `ceil(fraction x N)` of `shares` where the device has
  them, else that fraction of its `memory`;
- neither: no capacity request, so each capacity's `requestPolicy.default` (NVIDIA's memory mode: the whole
  memory, that is the whole GPU; its integer mode: one share).

Amounts are rounded up as the scheduler rounds them (`validValues`, `validRange` min/step, never above max
or the capacity); a device whose policy cannot give the ask does not count. What a share is charged is
the largest part of the device it takes (each capacity's amount over its value).

This is the DRA form of a share of a GPU: the scheduler accounts the capacities, and the driver enforces
only what its sharing configuration enforces (MPS and time-slicing through the driver's own sharing
settings are alpha gates of the driver and are not rendered).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from decimal import ROUND_CEILING, Decimal

from policies.vocabulary.quantities import GIB, MIB
from webhook.cluster.model import ClusterModel
from webhook.cluster.node_devices import DraDevice, DraNodeDevices, Tolerations

MEMORY = "memory"
SHARES = "shares"
SAMPLE_NODES = 64  # nodes of a type looked at per request (placement stays bounded on large clusters)


@dataclass(frozen=True)
class ShareAsk:
    fraction: Decimal | None = None
    memory: Decimal | None = None  # bytes


@dataclass(frozen=True)
class ShareOffer:
    """How one type's shared GPUs give the ask."""

    type_id: str
    requests: tuple[tuple[str, str], ...]  # capacity -> quantity, as the claim writes it
    fraction: Decimal  # the largest part of a device the share takes (what it is charged)
    devices: int  # shared devices (of the sampled nodes) that can give it
    free: int  # of those, the ones with the capacity left now


def _ceil(amount: Decimal) -> Decimal:
    return amount.to_integral_value(rounding=ROUND_CEILING)


def device_share(device: DraDevice, ask: ShareAsk) -> tuple[dict[str, Decimal], Decimal] | None:
    """(capacity -> amount it consumes, part of the device taken) for the ask, None when it cannot give it."""
    memory = device.capacity_policy(MEMORY)
    shares = device.capacity_policy(SHARES)
    wanted: dict[str, Decimal] = {}
    if ask.memory is not None:
        if memory is None:
            return None
        wanted[MEMORY] = _ceil(ask.memory)
    if ask.fraction is not None:
        if shares is not None:
            wanted[SHARES] = _ceil(ask.fraction * shares.value)
        elif memory is not None:
            wanted[MEMORY] = max(wanted.get(MEMORY, Decimal(0)), _ceil(ask.fraction * memory.value))
        else:
            return None
    consumed: dict[str, Decimal] = {}
    for name, amount in wanted.items():
        policy = device.capacity_policy(name)
        rounded = policy.round_up(amount) if policy is not None else None
        if rounded is None:
            return None
        consumed[name] = rounded
    part = Decimal(0)
    for name, policy in device.capacities:
        taken = consumed.get(name, policy.default_amount)
        if policy.value > 0:
            part = max(part, taken / policy.value)
    return consumed, min(Decimal(1), part)


def has_room(dra: DraNodeDevices, device: DraDevice, consumed: dict[str, Decimal], tolerations: Tolerations) -> bool:
    """Whether the device can take one more such share now: untainted for these tolerations, and each
    capacity (requested or taken by default) still left."""
    if device.blocked_by(tolerations):
        return False
    for name, policy in device.capacities:
        left = dra.capacity_left(device, name)
        if left is None or left < consumed.get(name, policy.default_amount):
            return False
    return True


def quantity_text(name: str, amount: Decimal) -> str:
    """A capacity amount as a quantity: memory in Gi or Mi where it is whole, else bytes; counts as integers."""
    if name == MEMORY:
        for unit, suffix in ((GIB, "Gi"), (MIB, "Mi")):
            if amount % unit == 0:
                return f"{int(amount / unit)}{suffix}"
    return str(int(amount))


def type_offer(model: ClusterModel, type_id: str, ask: ShareAsk, tolerations: Tolerations = ()) -> ShareOffer | None:
    """How `type_id`'s shared DRA GPUs give the ask; None when none of them can."""
    shares: list[tuple[DraDevice, dict[str, Decimal], Decimal, DraNodeDevices]] = []
    for node in model.types[type_id].dra_nodes[:SAMPLE_NODES]:
        dra = model.nodes[node].dra
        if dra is None:
            continue
        for device in dra.shared_gpus():
            found = device_share(device, ask)
            if found is not None:
                shares.append((device, found[0], found[1], dra))
    if not shares:
        return None
    names = sorted({name for _d, consumed, _p, _n in shares for name in consumed})
    requests = []
    for name in names:
        amounts = {consumed.get(name) for _d, consumed, _p, _n in shares}
        # One amount where every device rounds alike; else the ask itself, which each device rounds up.
        amount = amounts.pop() if len(amounts) == 1 else _raw(name, ask, shares)
        if amount is not None:
            requests.append((name, quantity_text(name, amount)))
    free = sum(1 for device, consumed, _p, dra in shares if has_room(dra, device, consumed, tolerations))
    return ShareOffer(type_id, tuple(requests), max(part for _d, _c, part, _n in shares), len(shares), free)


def _raw(name: str, ask: ShareAsk, shares: Sequence[tuple[DraDevice, dict[str, Decimal], Decimal, DraNodeDevices]]
         ) -> Decimal | None:
    if name == MEMORY and ask.memory is not None:
        return _ceil(ask.memory)
    # A fraction of devices that differ: the smallest amount any of them takes (each rounds it up).
    return min((c[name] for _d, c, _p, _n in shares if name in c), default=None)


def offers(model: ClusterModel, types: Iterable[str], ask: ShareAsk, tolerations: Tolerations = ()) -> list[ShareOffer]:
    """The types (in the order given) whose shared DRA GPUs can give the ask."""
    return [o for t in types if (o := type_offer(model, t, ask, tolerations)) is not None]


def shared_types(model: ClusterModel, types: Iterable[str]) -> list[str]:
    """The types with any DRA GPU that allows multiple allocations."""
    return [t for t in types
            if any(model.nodes[n].dra is not None and model.nodes[n].dra.shared_gpus()  # type: ignore[union-attr]
                   for n in model.types[t].dra_nodes[:SAMPLE_NODES])]


def percent(part: Decimal) -> int:
    return max(1, math.ceil(part * 100))
