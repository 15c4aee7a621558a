"""The parts of a DRA device that decide whether it can be allocated, as resource.k8s.io/v1 serves them
in Kubernetes 1.36: device taints, partitionable devices (shared counters) and consumable capacity.

- **Taints** (`Device.taints[]`: key, value, effect `None` | `NoSchedule` | `NoExecute`; beta and on in
  1.36): a device with a `NoSchedule` or `NoExecute` taint is allocated only to a request that tolerates
  it (`exactly.tolerations` / `firstAvailable[].tolerations`, the shape of a pod's toleration). `None` is
  informational, and so is an effect this release does not know (the API says to treat it like `None`).
  NVIDIA's driver taints unhealthy GPUs `gpu.nvidia.com/xid` (`NoSchedule`, `None` when non-fatal),
  `gpu.nvidia.com/gpu-lost` (`NoSchedule`) and `gpu.nvidia.com/unmonitored` (`None`).
- **Partitionable devices** (`ResourceSlice.spec.sharedCounters[]` {name, counters}, `Device.consumesCounters[]`
  {counterSet, counters}; beta and on): devices that consume counters of one counter set are partitions of
  one thing. NVIDIA's dynamic MIG publishes, per GPU, one counter set (`gpu-<n>-counter-set`: its
  multiprocessors, memory and one `memory-slice-<i>` counter of value 1 per memory slice), the whole GPU
  consuming all of it and every possible MIG placement consuming its share. A device can be allocated only
  while what it consumes is left of each counter after the allocated devices took theirs. Since 1.35 the
  counter sets may sit in a ResourceSlice of their own (no devices) of the same pool.
- **Consumable capacity** (`Device.allowMultipleAllocations`, `capacity.<name>.requestPolicy` {default,
  validValues | validRange {min, max, step}}; beta and on): such a device is allocated to several requests,
  each consuming `capacity.requests` (rounded up by the policy) of each capacity; allocations record
  `shareID` and `consumedCapacity`. NVIDIA's "consumable shares" publish `memory` (step 1Mi) and, in its
  integer mode, `shares` (1..N).

Everything is pure and bounded (the API's own limits: 16 taints a device, 2 counter consumptions of 32
counters, 8 counter sets of 32 counters a slice).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from decimal import ROUND_CEILING, Decimal
from typing import Any

from policies.vocabulary.quantities import parse_quantity

BLOCKING_EFFECTS = ("NoSchedule", "NoExecute")
MAX_TAINTS = 16
MAX_CONSUMPTIONS = 2
MAX_COUNTER_SETS = 8
MAX_COUNTERS = 32
MAX_VALID_VALUES = 10
MAX_TEXT = 256

CounterKey = tuple[str, str]  # (pool, counter set)
Counters = dict[str, Decimal]


def _quantity(raw: Any) -> Decimal | None:
    try:
        return parse_quantity(raw) if raw is not None else None
    except ValueError:
        return None


def _value(raw: Any) -> Decimal | None:
    """`{"value": quantity}` (a Counter or a DeviceCapacity) as a Decimal."""
    return _quantity(raw.get("value")) if isinstance(raw, dict) else None


@dataclass(frozen=True)
class DeviceTaint:
    key: str
    value: str
    effect: str

    @property
    def blocking(self) -> bool:
        """Whether the taint keeps the device from requests that do not tolerate it."""
        return self.effect in BLOCKING_EFFECTS

    def __str__(self) -> str:
        return f"{self.key}={self.value}:{self.effect}" if self.value else f"{self.key}:{self.effect}"


def read_taints(device: Mapping[str, Any]) -> tuple[DeviceTaint, ...]:
    raw = device.get("taints")
    if not isinstance(raw, list):
        return ()
    out = []
    for taint in raw[:MAX_TAINTS]:
        if isinstance(taint, dict) and isinstance(taint.get("key"), str) and taint["key"]:
            value = taint.get("value")
            out.append(DeviceTaint(taint["key"][:MAX_TEXT], str(value)[:MAX_TEXT] if value else "",
                                   str(taint.get("effect") or "")[:MAX_TEXT]))
    return tuple(out)


def tolerates(toleration: Mapping[str, Any], taint: DeviceTaint) -> bool:
    """A DeviceToleration (the same rules as a pod's toleration) against one device taint."""
    key = toleration.get("key") or ""
    operator = toleration.get("operator") or "Equal"
    effect = toleration.get("effect") or ""
    if effect and effect != taint.effect:
        return False
    if not key:
        return operator == "Exists"
    if key != taint.key:
        return False
    if operator == "Exists":
        return True
    return operator == "Equal" and (toleration.get("value") or "") == taint.value


def blocked(taints: Iterable[DeviceTaint], tolerations: Sequence[Mapping[str, Any]] = ()) -> list[DeviceTaint]:
    """The taints that keep a device from a request with these tolerations."""
    return [t for t in taints if t.blocking and not any(tolerates(tol, t) for tol in tolerations)]


def read_counter_sets(spec: Mapping[str, Any]) -> dict[str, Counters]:
    """A slice's `sharedCounters`: counter set -> counter -> value."""
    raw = spec.get("sharedCounters")
    out: dict[str, Counters] = {}
    if not isinstance(raw, list):
        return out
    for entry in raw[:MAX_COUNTER_SETS]:
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
            continue
        counters = entry.get("counters")
        if not isinstance(counters, dict):
            continue
        values = {str(k)[:MAX_TEXT]: amount for k, raw_value in list(counters.items())[:MAX_COUNTERS]
                  if (amount := _value(raw_value)) is not None}
        out[entry["name"][:MAX_TEXT]] = values
    return out


def read_consumption(device: Mapping[str, Any]) -> tuple[tuple[str, tuple[tuple[str, Decimal], ...]], ...]:
    """A device's `consumesCounters`: (counter set, ((counter, amount), ...)), at most two sets."""
    raw = device.get("consumesCounters")
    if not isinstance(raw, list):
        return ()
    out = []
    for entry in raw[:MAX_CONSUMPTIONS]:
        if not isinstance(entry, dict) or not isinstance(entry.get("counterSet"), str):
            continue
        counters = entry.get("counters")
        if not isinstance(counters, dict):
            continue
        amounts = tuple(sorted((str(k)[:MAX_TEXT], v) for k, raw_value in list(counters.items())[:MAX_COUNTERS]
                               if (v := _value(raw_value)) is not None))
        out.append((entry["counterSet"][:MAX_TEXT], amounts))
    return tuple(out)


@dataclass(frozen=True)
class CapacityPolicy:
    """One consumable capacity of a device that allows multiple allocations: its value and request policy."""

    value: Decimal
    default: Decimal | None = None
    valid_values: tuple[Decimal, ...] = ()
    minimum: Decimal | None = None
    maximum: Decimal | None = None
    step: Decimal | None = None

    def round_up(self, amount: Decimal) -> Decimal | None:
        """What a request for `amount` consumes (the scheduler's rounding), None when the policy cannot give
        it: the smallest valid value at least `amount`; in a range, at least `min`, then up to `min + n*step`,
        at most `max`; never more than the device has."""
        if self.valid_values:
            fitting = [v for v in self.valid_values if v >= amount]
            rounded = min(fitting) if fitting else None
        elif self.minimum is not None:
            rounded = max(amount, self.minimum)
            if self.step is not None and self.step > 0:
                steps = ((rounded - self.minimum) / self.step).to_integral_value(rounding=ROUND_CEILING)
                rounded = self.minimum + steps * self.step
            if self.maximum is not None and rounded > self.maximum:
                rounded = None
        else:
            rounded = amount
        return rounded if rounded is not None and rounded <= self.value else None

    @property
    def default_amount(self) -> Decimal:
        """What a request that does not name this capacity consumes: the policy's default, else all of it."""
        return self.default if self.default is not None else self.value


def read_capacities(device: Mapping[str, Any]) -> tuple[tuple[str, CapacityPolicy], ...]:
    """The consumable capacities of a device that allows multiple allocations (none for any other device:
    its capacities are attributes to select on, taken whole with the device)."""
    if device.get("allowMultipleAllocations") is not True:
        return ()
    raw = device.get("capacity")
    if not isinstance(raw, dict):
        return ()
    out = []
    for name, capacity in list(raw.items())[:MAX_COUNTERS]:
        value = _value(capacity)
        if value is None:
            continue
        policy = capacity.get("requestPolicy")
        if not isinstance(policy, dict):
            out.append((str(name)[:MAX_TEXT], CapacityPolicy(value)))
            continue
        valid = policy.get("validValues")
        values = tuple(sorted(v for raw_v in valid[:MAX_VALID_VALUES] if (v := _quantity(raw_v)) is not None)) \
            if isinstance(valid, list) else ()
        bounds = policy.get("validRange")
        if not isinstance(bounds, dict):
            bounds = {}
        out.append((str(name)[:MAX_TEXT], CapacityPolicy(
            value, _quantity(policy.get("default")), values,
            _quantity(bounds.get("min")), _quantity(bounds.get("max")), _quantity(bounds.get("step")),
        )))
    return tuple(sorted(out))


def consumed_capacity(result: Mapping[str, Any]) -> dict[str, Decimal]:
    """An allocation result's `consumedCapacity` (what one share of a shared device took)."""
    raw = result.get("consumedCapacity")
    if not isinstance(raw, dict):
        return {}
    return {str(k)[:MAX_TEXT]: v for k, raw_v in list(raw.items())[:MAX_COUNTERS]
            if (v := _quantity(raw_v)) is not None}


def fits(consumption: Iterable[tuple[str, tuple[tuple[str, Decimal], ...]]], pool: str,
         left: Mapping[CounterKey, Counters]) -> bool:
    """Whether what a device consumes is left of its pool's counters. A counter set the pool does not
    publish (yet: its slice not seen) does not hold the device back."""
    for counter_set, amounts in consumption:
        counters = left.get((pool, counter_set))
        if counters is None:
            continue
        for name, amount in amounts:
            if name in counters and counters[name] < amount:
                return False
    return True


def take(consumption: Iterable[tuple[str, tuple[tuple[str, Decimal], ...]]], pool: str,
         left: dict[CounterKey, Counters]) -> None:
    """Subtract what a device consumes from its pool's counters (they may go below zero: a stale slice)."""
    for counter_set, amounts in consumption:
        counters = left.get((pool, counter_set))
        if counters is None:
            continue
        for name, amount in amounts:
            if name in counters:
                counters[name] = counters[name] - amount


def copy_counters(counters: Mapping[CounterKey, Counters]) -> dict[CounterKey, Counters]:
    return {key: dict(values) for key, values in counters.items()}
