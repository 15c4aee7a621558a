"""The quota check of `/validate`: refuse a pod that would take its tenant over a limit, else reserve its GPUs.

Usage is the tenant's unfinished pods (passed in by the caller from its pod list) plus the reservations in
the store that no listed pod backs yet; reservations close the gap between an admission and the moment the
pod shows up in every replica's pod list. See docs/quotas.md for what is and is not guaranteed.
"""

from __future__ import annotations

import contextlib
import functools
import os
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from policies.api import WouldBlock
from policies.metrics import QUOTA_LIMIT, QUOTA_USED, add_series, record_refusal, replace_series
from policies.quota.model import (
    LimitKey,
    PodCharge,
    PriceOf,
    QuotaLimit,
    charge_belongs_to,
    charged_type,
    format_gpus,
    format_memory,
    hits,
    quota_limits,
    same_pod,
    same_pod_id,
)
from policies.quota.store import QuotaStatus, QuotaStore, QuotaUnavailable, Reservation, update_status

ZERO = Decimal(0)


@dataclass(frozen=True)
class QuotaDecision:
    allowed: bool
    message: str = ""
    # None when this admission reserved nothing new: no limit hit, refused, a dry run, or the reservations of
    # an earlier admission of the same pod kept (`_reserve`).
    reservation_id: str | None = None
    tenant: str = ""


@dataclass(frozen=True)
class UsageLine:
    tenant: str
    quota: str
    key: LimitKey
    used_gpus: Decimal
    limit_gpus: Decimal | None
    used_memory: Decimal
    limit_memory: Decimal | None


@dataclass(frozen=True)
class _Amount:
    gpus: Decimal
    memory: Decimal


def _pod_usage(pods: Iterable[PodCharge], keys: Iterable[LimitKey], price_of: PriceOf) -> dict[LimitKey, _Amount]:
    totals = {key: _Amount(ZERO, ZERO) for key in keys}
    for pod in pods:
        charged = charged_type(pod, price_of)
        for key, total in totals.items():
            if hits(pod, key, charged):
                totals[key] = _Amount(total.gpus + pod.gpu_equivalents, total.memory + (pod.gpu_memory_bytes or ZERO))
    return totals


def _gang_too_big(tenant: str, limits: Iterable[QuotaLimit], asked: _Amount, gang: tuple[str, int]) -> str | None:
    """Why the whole gang (`size` pods asking `asked` each) exceeds one of `limits` by itself; None if none."""
    name, size = gang
    whole = _Amount(asked.gpus * size, asked.memory * size)
    for limit in limits:
        if limit.gpus is not None and whole.gpus > limit.gpus:
            return (
                f"tenant {tenant}: gang {name} asks for {format_gpus(whole.gpus)} GPUs of {limit.key.described} in all "
                f"({size} pods x {format_gpus(asked.gpus)}), more than the tenant's limit of {format_gpus(limit.gpus)}"
            )
        if limit.gpu_memory is not None and whole.memory > limit.gpu_memory:
            return (
                f"tenant {tenant}: gang {name} asks for {format_memory(whole.memory)} of {limit.key.described} GPU "
                f"memory in all ({size} pods), more than the tenant's limit of {format_memory(limit.gpu_memory)}"
            )
    return None


def _over_limit(
    tenant: str, limit: QuotaLimit, used: _Amount, asked: _Amount, note: str
) -> str | None:
    if limit.gpus is not None and used.gpus + asked.gpus > limit.gpus:
        return (
            f"tenant {tenant}: {limit.key.described} {format_gpus(used.gpus)} of {format_gpus(limit.gpus)} GPUs "
            f"in use, this pod asks for {format_gpus(asked.gpus)}{note}"
        )
    if limit.gpu_memory is not None and used.memory + asked.memory > limit.gpu_memory:
        return (
            f"tenant {tenant}: {limit.key.described} {format_memory(used.memory)} of "
            f"{format_memory(limit.gpu_memory)} GPU memory in use, "
            f"this pod asks for {format_memory(asked.memory)}{note}"
        )
    return None


def new_reservation_id() -> str:
    """A random (version 4) UUID as 32 hex digits, as `uuid.uuid4().hex` writes it, without building a UUID
    object (a reservation is made on every admitted GPU pod under a quota)."""
    raw = bytearray(os.urandom(16))
    raw[6] = (raw[6] & 0x0F) | 0x40  # version 4
    raw[8] = (raw[8] & 0x3F) | 0x80  # RFC 4122 variant
    return raw.hex()


class QuotaService:
    def __init__(
        self,
        store: QuotaStore,
        price_of: Callable[[str], Decimal | None],
        grace_seconds: float = 60,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.price_of = price_of
        self.grace_seconds = grace_seconds
        self.clock = clock

    def check(
        self,
        charge: PodCharge,
        tenant: str,
        quotas: list[dict[str, Any]],
        usage_pods: Iterable[PodCharge],
        *,
        dry_run: bool,
        deadline: float | None,
        wait: bool = True,
        limits: Sequence[QuotaLimit] | None = None,
        gang: tuple[str, int] | None = None,
    ) -> QuotaDecision:
        """Admit or refuse `charge`; when admitted and not a dry run, reserve its GPUs in the store.

        `gang` (name, size) for a member of an all-or-nothing gang: the whole gang, `size` pods like this one,
        must fit within each limit it hits, or the member is refused before anything else (a gang whose
        pods the quota can never all admit would never start, and its first member would hold a whole
        NVLink room for it meanwhile, unlimited by the tenant's quota).

        `deadline` is a `time.monotonic()` value; raises QuotaUnavailable when the store cannot answer by then.
        Touches the store only when the pod hits at least one limit of its tenant. With `wait=False` the
        check is made only if the store can answer at once (one TenantQuota, its lock free); otherwise
        `policies.api.WouldBlock` is raised before anything is reserved. `limits` are the limits of `quotas`
        in their order (`quota_limits` of each) when the caller has them already.
        """
        charged = charged_type(charge, self.price_of)
        if limits is None:
            limits = [limit for quota in quotas for limit in quota_limits(quota)]
        hit = [limit for limit in limits if hits(charge, limit.key, charged)]
        asked = _Amount(charge.gpu_equivalents, charge.gpu_memory_bytes or ZERO)
        if not hit or (asked.gpus <= 0 and asked.memory <= 0):
            return QuotaDecision(True, tenant=tenant)
        if gang is not None:
            refusal = _gang_too_big(tenant, hit, asked, gang)
            if refusal is not None:
                record_refusal("quota")
                return QuotaDecision(False, refusal, tenant=tenant)
        pods = [
            p for p in usage_pods if charge_belongs_to(p, tenant, quotas) and not same_pod(charge, p.pod, p.uid)
        ]
        base = _pod_usage(pods, {limit.key for limit in hit}, self.price_of)
        note = self._steering_note(charge)
        reservation_id = new_reservation_id()
        by_quota: dict[str, list[QuotaLimit]] = {}
        for limit in hit:
            by_quota.setdefault(limit.quota, []).append(limit)
        if not wait and len(by_quota) > 1:
            # Several TenantQuota objects are reserved one after the other, with give-backs on refusal:
            # only where waiting is allowed.
            raise WouldBlock(f"{len(by_quota)} TenantQuota objects to reserve")
        reserved: list[tuple[str, tuple[Reservation, ...]]] = []  # (quota, the reservations this one replaced)
        for name in sorted(by_quota):
            reserve = functools.partial(
                self._reserve,
                charge=charge,
                tenant=tenant,
                limits=by_quota[name],
                pods=pods,
                base=base,
                asked=asked,
                note=note,
                reservation_id=reservation_id,
                dry_run=dry_run,
                may_keep=len(by_quota) == 1,
            )
            try:
                refusal, kept, replaced = update_status(self.store, name, reserve, deadline=deadline, wait=wait)
            except QuotaUnavailable:
                self._give_back(reserved, reservation_id, deadline)
                raise
            if refusal is not None:
                self._give_back(reserved, reservation_id, deadline)
                record_refusal("quota")
                return QuotaDecision(False, refusal, None, tenant)
            if not kept:
                reserved.append((name, replaced))
        return QuotaDecision(True, "", reservation_id if reserved and not dry_run else None, tenant)

    def _give_back(
        self, reserved: list[tuple[str, tuple[Reservation, ...]]], reservation_id: str, deadline: float | None
    ) -> None:
        # Limits in several TenantQuota objects cannot be taken in one write: undo the ones already taken.
        # Only this admission's own reservations go: with several objects, none is kept from an earlier
        # admission of the same pod (`_reserve`), so none that another admission relies on is taken away.
        # What this admission's reservation replaced (another admission of the same pod, which may have been
        # admitted meanwhile: an API server retrying the call) is put back, not lost with it.
        for name, replaced in reserved:
            with contextlib.suppress(QuotaUnavailable):  # not given back, it expires after the grace period
                self.release(name, reservation_id, deadline=deadline, restore=replaced)

    def _steering_note(self, charge: PodCharge) -> str:
        charged = charged_type(charge, self.price_of)
        if charge.bound_type or len(set(charge.candidate_types)) < 2 or charged is None:
            return ""
        if charge.every_candidate:
            types = sorted(set(charge.candidate_types))
            named = ", ".join(types[:6]) + (f" and {len(types) - 6} more" if len(types) > 6 else "")
            return f" (its own ResourceClaims may be given any of {named}, so it counts against each until bound)"
        return f" (counted against {charged}, the most expensive type it may run on, until it is bound)"

    def _reserve(
        self,
        status: QuotaStatus,
        *,
        charge: PodCharge,
        tenant: str,
        limits: list[QuotaLimit],
        pods: list[PodCharge],
        base: Mapping[LimitKey, _Amount],
        asked: _Amount,
        note: str,
        reservation_id: str,
        dry_run: bool,
        may_keep: bool = True,
    ) -> tuple[QuotaStatus | None, tuple[str | None, bool, tuple[Reservation, ...]]]:
        """The new status and (the refusal or None, whether the pod's earlier reservations were kept, the
        reservations of the same pod this one replaces).

        `may_keep` only where the pod's limits are in this one TenantQuota object: an admission that reserves
        in several gives back what it reserved when a later object refuses, so a reservation it made may
        vanish while it runs. Another admission of the same pod (an API server retrying the call) that kept
        it would be admitted with nothing held; it writes its own instead, which that give-back leaves."""
        now = self.clock()
        listed = _ListedPods(pods)
        # A reservation ends when it expires or when the pod list shows its pod (the list counts it from
        # then on): the status, read and written on every admission, holds only pods not listed yet.
        live = [r for r in status.reservations if r.expires_at > now and not listed.shows(r)]
        mine: list[Reservation] = []  # of an earlier admission of this pod
        pending: list[Reservation] = []
        for r in live:
            (mine if same_pod(charge, r.pod, r.pod_uid) else pending).append(r)
        for limit in limits:
            reserved = [r for r in pending if r.key == limit.key]
            used = _Amount(
                base[limit.key].gpus + sum((r.gpus for r in reserved), ZERO),
                base[limit.key].memory + sum((r.gpu_memory or ZERO for r in reserved), ZERO),
            )
            refusal = _over_limit(tenant, limit, used, asked, note if limit.key.kind == "acceleratorType" else "")
            if refusal is not None:
                return None, (refusal + self._reserved_note(reserved), False, ())
        if dry_run:
            return None, (None, False, ())
        keys = sorted({limit.key for limit in limits})
        if may_keep and self._still_held(charge, keys, mine, asked, now):
            return None, (None, True, ())
        # A repeated admission of the same pod replaces its earlier reservation instead of adding to it.
        new = [
            Reservation(
                id=reservation_id,
                pod=charge.pod,
                pod_uid=charge.uid,
                key=key,
                gpus=asked.gpus,
                gpu_memory=charge.gpu_memory_bytes,
                created_at=now,
                expires_at=now + self.grace_seconds,
            )
            for key in keys
        ]
        return QuotaStatus(tuple(pending + new), status.used), (None, False, tuple(mine))

    def _still_held(
        self, charge: PodCharge, keys: list[LimitKey], held: list[Reservation], asked: _Amount, now: float
    ) -> bool:
        """Whether the pod's reservations from an earlier admission already hold exactly what this one would
        reserve, with at least half the grace period left: they are kept, and nothing is written.

        An API server retrying a call, or the same pod asked about again, would otherwise rewrite the
        shared state on every admission, and every other worker would parse it again. Half the grace
        period is still far longer than a pod takes to show in the pod list after it is created.
        """
        if [r.key for r in held] != keys:
            return False
        fresh_until = now + self.grace_seconds / 2
        return all(
            r.gpus == asked.gpus and r.gpu_memory == charge.gpu_memory_bytes and r.expires_at >= fresh_until
            and r.pod == charge.pod and r.pod_uid == charge.uid
            for r in held
        )

    def _reserved_note(self, reserved: list[Reservation]) -> str:
        """Why the use is higher than `kgwe review`, the UI or a pod list show: reservations of pods admitted
        moments ago that the pod list does not show yet (in YAML mode, pods that were only reviewed)."""
        gpus = sum((r.gpus for r in reserved), ZERO)
        if gpus <= 0:
            return ""
        count = len({r.pod for r in reserved})
        return (f"; {format_gpus(gpus)} of these GPUs are reserved for {count} pod{'s' if count != 1 else ''} "
                f"admitted in the last {format_gpus(Decimal(str(self.grace_seconds)))} s that the pod list does not "
                "show yet (quotas.reservationGraceSeconds)")

    def release(
        self, quota: str, reservation_id: str, *, deadline: float | None = None, restore: Iterable[Reservation] = ()
    ) -> None:
        """Drop a reservation, e.g. when a later step refuses the pod after the quota check admitted it.

        `restore`: the reservations it replaced, put back where it is dropped, while they are live and no
        other reservation of their pod took its place."""
        restore = tuple(restore)

        def drop(status: QuotaStatus) -> tuple[QuotaStatus | None, None]:
            kept = tuple(r for r in status.reservations if r.id != reservation_id)
            if len(kept) == len(status.reservations):
                return None, None
            now = self.clock()
            back = tuple(
                r for r in restore
                if r.expires_at > now and not any(same_pod_id(r.pod, r.pod_uid, o.pod, o.pod_uid) for o in kept)
            )
            return QuotaStatus(kept + back, status.used), None

        update_status(self.store, quota, drop, deadline=deadline)

    def release_all(self, quotas: list[dict[str, Any]], reservation_id: str, *, deadline: float | None = None) -> None:
        for name in sorted({limit.quota for quota in quotas for limit in quota_limits(quota)}):
            self.release(name, reservation_id, deadline=deadline)

    def usage(self, tenant: str, quotas: list[dict[str, Any]], usage_pods: Iterable[PodCharge]) -> list[UsageLine]:
        """Use per limit from the tenant's pods alone (no reservations): for status.used, the API and metrics."""
        return usage_lines(tenant, quotas, usage_pods, self.price_of)


class _ListedPods:
    """The pods of the pod list, by uid and by name: `same_pod` against all of them in O(1)."""

    def __init__(self, pods: Iterable[PodCharge]) -> None:
        self._uids = {p.uid for p in pods if p.uid}
        self._names = {p.pod for p in pods}
        self._names_without_uid = {p.pod for p in pods if not p.uid}

    def shows(self, reservation: Reservation) -> bool:
        # same_pod's rule: uids decide when both sides have one, names otherwise.
        if reservation.pod_uid:
            return reservation.pod_uid in self._uids or reservation.pod in self._names_without_uid
        return reservation.pod in self._names


def usage_lines(
    tenant: str, quotas: list[dict[str, Any]], usage_pods: Iterable[PodCharge], price_of: PriceOf
) -> list[UsageLine]:
    limits = [limit for quota in quotas for limit in quota_limits(quota)]
    pods = [p for p in usage_pods if charge_belongs_to(p, tenant, quotas)]
    totals = _pod_usage(pods, {limit.key for limit in limits}, price_of)
    lines = [
        UsageLine(
            tenant,
            limit.quota,
            limit.key,
            totals[limit.key].gpus,
            limit.gpus,
            totals[limit.key].memory,
            limit.gpu_memory,
        )
        for limit in limits
    ]
    publish_metrics(lines)
    return lines


def publish_metrics(lines: Iterable[UsageLine], *, every_tenant: bool = False) -> None:
    """`kgwe_quota_used` and `kgwe_quota_limit` of these lines. With `every_tenant` (the reconciler's whole
    view) the series of deleted quotas or limits go instead of freezing at their last value."""
    used: dict[tuple[str, ...], float] = {}
    tightest: dict[tuple[str, str], Decimal] = {}
    for line in lines:
        labels = (line.tenant, line.key.metric_type)
        used[labels] = float(line.used_gpus)
        if line.limit_gpus is not None:
            tightest[labels] = min(tightest.get(labels, line.limit_gpus), line.limit_gpus)
    limits: dict[tuple[str, ...], float] = {labels: float(limit) for labels, limit in tightest.items()}
    publish = replace_series if every_tenant else add_series
    publish(QUOTA_USED, used)
    publish(QUOTA_LIMIT, limits)
