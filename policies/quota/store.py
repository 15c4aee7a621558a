"""Where quota reservations live, behind one compare-and-swap contract.

The contract (every QuotaStore): `read(quota)` returns the TenantQuota's status with an opaque version;
`write(quota, status, version)` stores the status only if the version is still the one read and returns
True, else writes nothing and returns False (someone else wrote first: read again and retry). Failures to
reach the store raise QuotaUnavailable. `update_status` is the retry loop every caller uses.
"""

from __future__ import annotations

import functools
import random
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any, Protocol, TypeVar

import orjson

from policies.api import WouldBlock
from policies.quota.model import GIB, LimitKey, parse_amount

T = TypeVar("T")


class QuotaUnavailable(RuntimeError):
    """The quota store could not be read or written in time: the webhook applies its failure behaviour."""


class QuotaNotFound(QuotaUnavailable):
    """The TenantQuota object is gone; trying again will not help."""


@dataclass(frozen=True)
class Reservation:
    """GPUs held for a pod between its admission and the moment the pod list shows it."""

    id: str
    pod: str  # namespace/name
    pod_uid: str | None
    key: LimitKey
    gpus: Decimal
    gpu_memory: Decimal | None
    created_at: float  # seconds since the epoch: replicas share wall-clock time, not monotonic time
    expires_at: float

    @functools.cached_property
    def entry(self) -> dict[str, Any]:
        """Its `status.reservations` entry, made once per reservation (a status holds every pending one, and
        is written on every admission). Not to be changed: `status_to_json` hands out copies."""
        return _reservation_json(self)


@dataclass(frozen=True)
class UsedEntry:
    key: LimitKey
    gpus: Decimal
    gpu_memory: Decimal | None = None


@dataclass(frozen=True)
class QuotaStatus:
    reservations: tuple[Reservation, ...] = ()
    used: tuple[UsedEntry, ...] = ()


@dataclass(frozen=True)
class Versioned:
    status: QuotaStatus
    version: str


class QuotaStore(Protocol):
    def read(self, quota: str, *, timeout: float | None = None) -> Versioned: ...

    def write(self, quota: str, status: QuotaStatus, version: str, *, timeout: float | None = None) -> bool: ...


class TransactionalQuotaStore(QuotaStore, Protocol):
    """A store that can hold its lock across read, change and write (one process's memory, a locked file).

    `transact` reads the status, applies `change` and stores its new status (when it returned one) as one
    step no other writer can interleave with: one lock and one read instead of the compare-and-swap's two
    of each. Raises QuotaUnavailable like `read` and `write`.
    """

    def transact(
        self,
        quota: str,
        change: Callable[[QuotaStatus], tuple[QuotaStatus | None, T]],
        *,
        timeout: float | None,
        wait: bool = True,
    ) -> T:
        """With `wait=False`, raises `policies.api.WouldBlock` (and changes nothing) when the lock is held."""
        ...


def remaining(deadline: float | None) -> float | None:
    """Seconds left before a `time.monotonic()` deadline; QuotaUnavailable once it has passed."""
    if deadline is None:
        return None
    left = deadline - time.monotonic()
    if left <= 0:
        raise QuotaUnavailable("the admission deadline passed before the quota store answered")
    return left


def update_status(
    store: QuotaStore,
    quota: str,
    change: Callable[[QuotaStatus], tuple[QuotaStatus | None, T]],
    *,
    deadline: float | None,
    max_attempts: int = 100,
    max_errors: int = 2,
    wait: bool = True,
) -> T:
    """Read, apply `change`, write if it returned a new status; on a lost race read again.

    `change` must be pure: it runs once per attempt on a fresh read. A failed call is tried again (up to
    `max_errors` times, within the deadline): that is safe because a write whose answer was lost shows up in
    the next read, and `change` sees it there.

    With `wait=False` the change is made only if it can be made at once (a transactional store whose lock
    is free); otherwise `policies.api.WouldBlock` is raised and nothing is changed.
    """
    if not wait:
        if not hasattr(store, "transact"):
            raise WouldBlock(f"TenantQuota {quota}: the store is on the network")
        return store.transact(quota, change, timeout=0.0, wait=False)  # type: ignore[no-any-return,attr-defined]
    errors = 0
    transact = getattr(store, "transact", None)
    for attempt in range(max_attempts):
        try:
            if transact is not None:  # a TransactionalQuotaStore: no lost races to retry
                return transact(quota, change, timeout=remaining(deadline))  # type: ignore[no-any-return]
            current = store.read(quota, timeout=remaining(deadline))
            new_status, result = change(current.status)
            if new_status is None or new_status == current.status:
                return result
            if store.write(quota, new_status, current.version, timeout=remaining(deadline)):
                return result
        except QuotaNotFound:
            raise
        except QuotaUnavailable:
            errors += 1
            if errors > max_errors or (deadline is not None and time.monotonic() >= deadline):
                raise
        # Jittered backoff so that replicas racing for the same quota do not collide in lockstep.
        time.sleep(random.uniform(0, min(0.1, 0.002 * 2**attempt)))
    raise QuotaUnavailable(f"TenantQuota {quota}: gave up after {max_attempts} conflicting writes")


class InMemoryQuotaStore:
    """Thread-safe store for one process: YAML mode and tests. Versions are counters."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._states: dict[str, tuple[int, QuotaStatus]] = {}

    def read(self, quota: str, *, timeout: float | None = None) -> Versioned:
        with self._lock:
            version, status = self._states.get(quota, (0, QuotaStatus()))
        return Versioned(status, str(version))

    def write(self, quota: str, status: QuotaStatus, version: str, *, timeout: float | None = None) -> bool:
        with self._lock:
            current, _ = self._states.get(quota, (0, QuotaStatus()))
            if str(current) != version:
                return False
            self._states[quota] = (current + 1, status)
            return True

    def transact(
        self,
        quota: str,
        change: Callable[[QuotaStatus], tuple[QuotaStatus | None, T]],
        *,
        timeout: float | None,
        wait: bool = True,
    ) -> T:
        if not self._lock.acquire(blocking=wait):
            raise WouldBlock(f"TenantQuota {quota}: held by another request", soon=True)
        try:
            version, status = self._states.get(quota, (0, QuotaStatus()))
            new_status, result = change(status)
            if new_status is not None and new_status != status:
                self._states[quota] = (version + 1, new_status)
            return result
        finally:
            self._lock.release()


# --- status <-> TenantQuota JSON (`status.reservations`, `status.used`) ---------------------------------


def _amount_json(value: Decimal) -> int | str:
    # The CRD types amounts as int-or-string: whole GPUs as integers, fractions (MIG sevenths, MPS shares)
    # as exact decimal strings.
    return int(value) if value == value.to_integral_value() else f"{value.normalize():f}"


def _memory_json(value: Decimal) -> str:
    # Exact quantities: status amounts are summed again when read back.
    if value % GIB == 0:
        return f"{int(value / GIB)}Gi"
    return f"{value.normalize():f}"


def _timestamp(epoch: float) -> str:
    # isoformat is several times cheaper than strftime; the same text ("...T12:00:00.000000Z").
    return datetime.fromtimestamp(epoch, UTC).replace(tzinfo=None).isoformat(timespec="microseconds") + "Z"


def _epoch(text: Any) -> float | None:
    if not isinstance(text, str):
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _key_json(key: LimitKey) -> dict[str, Any]:
    return {key.kind: key.name}


def _key_from(entry: Mapping[str, Any]) -> LimitKey | None:
    if entry.get("acceleratorType"):
        return LimitKey("acceleratorType", str(entry["acceleratorType"]))
    if entry.get("profile"):
        return LimitKey("profile", str(entry["profile"]))
    return None


# Every admission of a GPU pod under a quota reads and writes its whole status, and most reservations in it
# are the same from one admission to the next: each is converted once each way. To JSON, a reservation
# keeps its entry (`Reservation.entry`); from JSON, entries are remembered by their exact JSON text (types
# included: 1, 1.0 and true differ). The memo is bounded (it starts again when full), so a flood of
# distinct reservations only costs conversions; what it holds is immutable.
RESERVATION_MEMO_SIZE = 4096


def _reservation_json(r: Reservation) -> dict[str, Any]:
    namespace, _, name = r.pod.partition("/")
    item: dict[str, Any] = {"id": r.id, "namespace": namespace, "name": name}
    if r.pod_uid:
        item["uid"] = r.pod_uid
    item.update(_key_json(r.key))
    item["gpus"] = _amount_json(r.gpus)
    if r.gpu_memory is not None:
        item["gpuMemory"] = _memory_json(r.gpu_memory)
    item["created"] = _timestamp(r.created_at)
    item["expires"] = _timestamp(r.expires_at)
    return item


def status_to_json(status: QuotaStatus) -> dict[str, Any]:
    """`status.reservations` and `status.used` in the shape of the TenantQuota CRD's status schema."""
    reservations = [dict(r.entry) for r in status.reservations]  # copies: callers own them
    used = []
    for u in status.used:
        line: dict[str, Any] = {**_key_json(u.key), "gpus": _amount_json(u.gpus)}
        if u.gpu_memory is not None:
            line["gpuMemory"] = _memory_json(u.gpu_memory)
        used.append(line)
    return {"reservations": reservations, "used": used}


# Reservations already read, by the exact JSON text of their entry.
_READ: dict[bytes, Reservation | None] = {}
_UNREAD = object()


def _reservation_from(item: Mapping[str, Any]) -> Reservation | None:
    """The reservation of one status entry, None when it is mangled."""
    key = _key_from(item)
    gpus = parse_amount(item.get("gpus"))
    expires = _epoch(item.get("expires"))
    if key is None or gpus is None or expires is None:
        return None
    created = _epoch(item.get("created"))
    return Reservation(
        id=str(item.get("id", "")),
        pod=f"{item.get('namespace', '')}/{item.get('name', '')}",
        pod_uid=str(item["uid"]) if item.get("uid") else None,
        key=key,
        gpus=gpus,
        gpu_memory=parse_amount(item.get("gpuMemory")),
        created_at=created if created is not None else expires,
        expires_at=expires,
    )


def _remembered_reservation(item: Mapping[str, Any]) -> Reservation | None:
    try:
        text = orjson.dumps(item)
    except TypeError:  # not JSON (only a caller's own object can be): convert it uncached
        return _reservation_from(item)
    found = _READ.get(text, _UNREAD)
    if found is not _UNREAD:
        return found  # type: ignore[return-value]
    if len(_READ) >= RESERVATION_MEMO_SIZE:
        _READ.clear()
    reservation = _READ[text] = _reservation_from(item)
    return reservation


def status_from_json(raw: Mapping[str, Any] | None) -> QuotaStatus:
    """Parse what we wrote; entries someone else mangled are dropped (a reservation lost is re-checked by pods)."""
    raw = raw or {}
    reservations = []
    for item in raw.get("reservations") or []:
        if not isinstance(item, Mapping):
            continue
        reservation = _remembered_reservation(item)
        if reservation is not None:
            reservations.append(reservation)
    used = []
    for line in raw.get("used") or []:
        if not isinstance(line, Mapping):
            continue
        key = _key_from(line)
        gpus = parse_amount(line.get("gpus"))
        if key is not None and gpus is not None:
            used.append(UsedEntry(key, gpus, parse_amount(line.get("gpuMemory"))))
    return QuotaStatus(tuple(reservations), tuple(used))
