"""The quota queue: which gated pods of a tenant may start now, on which type, and why the others wait.

Pure functions over charges and limits (SPEC section 10). Usage is what the tenant's released pods count
(`Ledger`); the waiting pods (`Waiter`: one pod, or a sized gang released whole) are taken in their order,
each on the first type of its own order that its quota holds, preferring a type with free capacity
now. `BestEffortFIFO` lets a pod that fits pass one that does not; `StrictFIFO` stops at the first that
does not. Nothing here reads the cluster or writes anything: the webhook's quota controller applies the
answer, `/validate` and `kgwe review` ask it about one more pod.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Literal

from policies.quota.model import LimitKey, PodCharge, QuotaLimit, format_gpus, format_memory

ZERO = Decimal(0)
Order = Literal["BestEffortFIFO", "StrictFIFO"]


@dataclass(frozen=True)
class Ask:
    """What one gated pod asks, and the types it may be charged (its own preference order, already narrowed to
    the types it can run on)."""

    pod: str  # namespace/name
    uid: str | None
    types: tuple[str, ...]
    profile: str | None
    gpus: Decimal
    memory: Decimal  # bytes; 0 when unknown
    # GPUs through the pod's own ResourceClaims: the claim's selectors pick the type, not KGWE, so it counts
    # against every candidate type and is never pinned.
    every_type: bool = False
    # Every type KGWE wrote on the pod, before `types` was narrowed to those with a node it can run on now: a
    # pod charged one of several is pinned to it even when only that one has a node for it now (nodes are
    # uncordoned, labelled, added; the scheduler would bind it to a type its quota never counted).
    may_run_on: tuple[str, ...] = ()


@dataclass(frozen=True)
class Waiter:
    """One pod, or a sized gang (every member, released together on one type)."""

    label: str  # "pod team-a/train-0" or "gang team-a/llm"
    asks: tuple[Ask, ...]
    order: tuple[str, str]  # (creationTimestamp, name): who came first


@dataclass(frozen=True)
class Release:
    waiter: Waiter
    type_id: str | None  # the type every member is charged and pinned to; None when no type limit narrows it
    pin: bool  # the pod may run on several types: add the type to its node constraints


@dataclass(frozen=True)
class Wait:
    waiter: Waiter
    reason: str  # "nvidia-h100-80gb 14 of 16 GPUs in use; this pod asks 4"
    position: int  # 1-based place among the tenant's waiting pods


@dataclass
class TenantQueue:
    tenant: str
    ledger: Ledger  # what the tenant uses once this queue's releases hold quota
    releases: list[Release] = field(default_factory=list)
    waits: list[Wait] = field(default_factory=list)


def ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


class Ledger:
    """What a tenant's released pods use, per limit key (GPU-equivalents and GPU memory)."""

    def __init__(self, limits: Sequence[QuotaLimit]) -> None:
        self.limits = list(limits)
        self.keys = {limit.key for limit in self.limits}
        self.gpus: dict[LimitKey, Decimal] = dict.fromkeys(self.keys, ZERO)
        self.memory: dict[LimitKey, Decimal] = dict.fromkeys(self.keys, ZERO)

    def _add(self, key: LimitKey, gpus: Decimal, memory: Decimal) -> None:
        if key in self.keys:
            self.gpus[key] += gpus
            self.memory[key] += memory

    def charge(self, charge: PodCharge) -> None:
        """Count a pod that is released (not gated): against its node's type once bound, else against every
        type it may still land on (a pod KGWE pinned has one), and against its profile."""
        types = (charge.bound_type,) if charge.bound_type else tuple(dict.fromkeys(charge.candidate_types))
        memory = charge.gpu_memory_bytes or ZERO
        for type_id in types:
            self._add(LimitKey("acceleratorType", type_id), charge.gpu_equivalents, memory)
        if charge.profile:
            self._add(LimitKey("profile", charge.profile), charge.gpu_equivalents, memory)

    def take(self, ask: Ask, type_id: str | None) -> None:
        types = ask.types if ask.every_type else ((type_id,) if type_id else ())
        for t in types:
            self._add(LimitKey("acceleratorType", t), ask.gpus, ask.memory)
        if ask.profile:
            self._add(LimitKey("profile", ask.profile), ask.gpus, ask.memory)

    def hit(self, ask: Ask, type_id: str | None) -> list[QuotaLimit]:
        """The limits that charging `ask` to `type_id` would count against."""
        types = set(ask.types) if ask.every_type else ({type_id} if type_id else set())
        return [
            limit for limit in self.limits
            if (limit.key.kind == "acceleratorType" and limit.key.name in types)
            or (limit.key.kind == "profile" and limit.key.name == ask.profile)
        ]

    def breaks(self, asks: Sequence[tuple[Ask, str | None]]) -> str | None:
        """Why these asks together do not fit what is used now (the first limit they break), None if they fit."""
        extra_gpus: dict[LimitKey, Decimal] = {}
        extra_memory: dict[LimitKey, Decimal] = {}
        asked_gpus: dict[LimitKey, Decimal] = {}
        limits: dict[tuple[str, LimitKey], QuotaLimit] = {}
        for ask, type_id in asks:
            for limit in self.hit(ask, type_id):
                extra_gpus[limit.key] = extra_gpus.get(limit.key, ZERO) + ask.gpus
                extra_memory[limit.key] = extra_memory.get(limit.key, ZERO) + ask.memory
                asked_gpus[limit.key] = extra_gpus[limit.key]
                limits[(limit.quota, limit.key)] = limit
        for limit in limits.values():
            key = limit.key
            if limit.gpus is not None and self.gpus[key] + extra_gpus[key] > limit.gpus:
                return (f"{key.described} {format_gpus(self.gpus[key])} of {format_gpus(limit.gpus)} GPUs in use; "
                        f"{_this(asks)} asks {format_gpus(asked_gpus[key])}")
            if limit.gpu_memory is not None and self.memory[key] + extra_memory[key] > limit.gpu_memory:
                return (f"{key.described} {format_memory(self.memory[key])} of {format_memory(limit.gpu_memory)} "
                        f"GPU memory in use; {_this(asks)} asks {format_memory(extra_memory[key])}")
        return None


def _this(asks: Sequence[tuple[Ask, str | None]]) -> str:
    return "this gang" if len(asks) > 1 else "this pod"


def never_fits(limits: Sequence[QuotaLimit], asks: Sequence[Ask]) -> str | None:
    """Why `asks` (a pod, or a whole gang) could never run under these limits, even with nothing else in use:
    on every type it may be charged, some limit is smaller than the ask alone. None when some type could hold it."""
    reasons: list[str] = []
    for type_id in _shared_types(asks):
        broken = _first_broken(limits, asks, type_id)
        if broken is None:
            return None
        reasons.append(broken)
    whom = "this gang" if len(asks) > 1 else "this pod"
    return f"{' and '.join(reasons)}; {whom} could never run within it"


def _first_broken(limits: Sequence[QuotaLimit], asks: Sequence[Ask], type_id: str | None) -> str | None:
    """The first limit that the asks alone exceed when charged to `type_id`, in words."""
    ledger = Ledger(limits)
    gpus: dict[LimitKey, Decimal] = {}
    memory: dict[LimitKey, Decimal] = {}
    hit: dict[LimitKey, list[QuotaLimit]] = {}
    for ask in asks:
        for limit in ledger.hit(ask, type_id):
            if limit not in hit.setdefault(limit.key, []):
                hit[limit.key].append(limit)
        for key in {limit.key for limit in ledger.hit(ask, type_id)}:
            gpus[key] = gpus.get(key, ZERO) + ask.gpus
            memory[key] = memory.get(key, ZERO) + ask.memory
    whom = "the gang asks" if len(asks) > 1 else "this pod asks"
    for key, found in hit.items():
        for limit in found:
            if limit.gpus is not None and gpus[key] > limit.gpus:
                return (f"{key.described} limit {format_gpus(limit.gpus)} GPUs, {whom} "
                        f"{format_gpus(gpus[key])}")
            if limit.gpu_memory is not None and memory[key] > limit.gpu_memory:
                return (f"{key.described} limit {format_memory(limit.gpu_memory)} GPU memory, {whom} "
                        f"{format_memory(memory[key])}")
    return None


def _shared_types(asks: Sequence[Ask]) -> tuple[str | None, ...]:
    """The types every ask may be charged, in the first ask's order (None alone when a claim picks the type or
    the pod names none)."""
    if not asks:
        return ()
    if any(ask.every_type for ask in asks) or not asks[0].types:
        return (None,)
    common = set(asks[0].types)
    for ask in asks[1:]:
        common &= set(ask.types)
    return tuple(t for t in asks[0].types if t in common)


def plan_queue(
    tenant: str,
    limits: Sequence[QuotaLimit],
    released: Iterable[PodCharge],
    waiters: Iterable[Waiter],
    *,
    order: Order = "BestEffortFIFO",
    has_capacity: Callable[[Waiter, str], bool] = lambda _w, _t: True,
    hold: str | None = None,
) -> TenantQueue:
    """Which of the tenant's waiters may start now and which wait (with why and their place in line).

    `released`: the tenant's pods that hold quota now (not terminal, not gated). A waiter is released on the
    first type in its order that the quota holds and that `has_capacity` says has room now; failing that, on
    the first type the quota holds (the scheduler queues it until room frees: it must not wait here for ever
    on a guess about capacity). `hold`: a reason every waiter of the tenant waits for, whatever its quota
    (a budget passed with `action: Queue`, policies/quota/budget.py), in order.
    """
    ledger = Ledger(limits)
    for charge in released:
        ledger.charge(charge)
    queue = TenantQueue(tenant, ledger)
    blocked = False
    if hold is not None:
        for position, waiter in enumerate(sorted(waiters, key=lambda w: w.order), start=1):
            queue.waits.append(Wait(waiter, hold, position))
        return queue
    for waiter in sorted(waiters, key=lambda w: w.order):
        chosen: str | None = None
        found = False
        first_reason: str | None = None
        if not blocked:
            fitting: list[str | None] = []
            for type_id in _shared_types(waiter.asks):
                why = ledger.breaks([(ask, type_id) for ask in waiter.asks])
                if why is None:
                    fitting.append(type_id)
                elif first_reason is None:
                    first_reason = why
            if fitting:
                found = True
                chosen = next((t for t in fitting if t is None or has_capacity(waiter, t)), fitting[0])
        if found:
            for ask in waiter.asks:
                ledger.take(ask, chosen)
            pin = chosen is not None and any(
                len(ask.may_run_on or ask.types) > 1 and not ask.every_type for ask in waiter.asks)
            queue.releases.append(Release(waiter, chosen, pin))
            continue
        if blocked and first_reason is None:
            first_reason = "an earlier pod of the tenant waits first (quotas.order: StrictFIFO)"
        queue.waits.append(Wait(waiter, first_reason or "no type it may run on has quota left", len(queue.waits) + 1))
        if order == "StrictFIFO":
            blocked = True
    return queue


def wait_message(tenant: str, wait: Wait) -> str:
    """The words a waiting pod carries, e.g. `team-a: nvidia-h100-80gb 14 of 16 GPUs in use; this pod asks 4;
    2nd in line`."""
    return f"{tenant}: {wait.reason}; {ordinal(wait.position)} in line"
