"""The workers' shared mapping (policies/quota/mapped_store.py): a worker that dies mid-write leaves the
last state whole; a damaged state refuses every check and is never overwritten."""

from __future__ import annotations

import fcntl
import mmap
import multiprocessing
import os
import time
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import REGISTRY
from quota_fixtures import charge, unique_name

from policies.api import WouldBlock
from policies.quota.check import QuotaService
from policies.quota.file_store import QuotaStateCorrupt
from policies.quota.mapped_store import HEADER_BYTES, MAGIC, MappedQuotaStore
from policies.quota.model import LimitKey
from policies.quota.store import QuotaStatus, QuotaUnavailable, Reservation, UsedEntry

H100 = "nvidia-h100-80gb"
SLOT = 1 << 20


def _service(path: Path) -> tuple[MappedQuotaStore, QuotaService]:
    store = MappedQuotaStore(path, slot_bytes=SLOT)
    return store, QuotaService(store, lambda _: None, grace_seconds=600)


def _quota(name: str, gpus: int = 8) -> dict[str, Any]:
    return {"apiVersion": "kgwe.io/v1alpha1", "kind": "TenantQuota", "metadata": {"name": name},
            "spec": {"tenant": name, "namespaces": [name], "limits": [{"acceleratorType": H100, "gpus": gpus}]}}


def _admit(service: QuotaService, quota: dict[str, Any], pod: str) -> bool:
    name = quota["metadata"]["name"]
    return service.check(charge(name, pod, Decimal(1), H100, uid=f"uid-{pod}"), name, [quota], [], dry_run=False,
                         deadline=time.monotonic() + 5).allowed


def _die_mid_write(path: str, first: bool = False) -> None:
    """A worker killed while copying a new state into the inactive slot (before the index flips), or with
    `first` the first state ever into slot 0 (before any header)."""
    with open(path, "r+b") as handle:
        mapped = mmap.mmap(handle.fileno(), 0)
        start = HEADER_BYTES + (0 if first else (1 - mapped[8]) * SLOT)
        mapped[start:start + 64] = (b"{" if first else b"\xff") + b"\xff" * 63  # half a document
        mapped.flush()
    os._exit(0)


def test_a_worker_dying_mid_write_leaves_the_last_state(tmp_path: Path) -> None:
    path = tmp_path / "quota-state.json"
    store, service = _service(path)
    quota = _quota(unique_name("mapped"))
    assert _admit(service, quota, "first")
    process = multiprocessing.get_context("fork").Process(target=_die_mid_write, args=(str(path),))
    process.start()
    process.join(20)
    # Another worker (a new mapping) reads the state as it was, and goes on writing.
    other, other_service = _service(path)
    assert [r.pod for r in other.read(quota["metadata"]["name"]).status.reservations] == [
        f"{quota['metadata']['name']}/first"
    ]
    assert _admit(other_service, quota, "second")
    assert len(store.read(quota["metadata"]["name"]).status.reservations) == 2


def test_a_worker_dying_mid_first_write_leaves_a_state_never_written(tmp_path: Path) -> None:
    path = tmp_path / "quota-state.json"
    store, service = _service(path)
    quota = _quota(unique_name("first-write"))
    store.read(quota["metadata"]["name"])  # the file made, all zeros
    process = multiprocessing.get_context("fork").Process(target=_die_mid_write, args=(str(path), True))
    process.start()
    process.join(20)
    assert store.read(quota["metadata"]["name"]).status.reservations == ()
    assert _admit(service, quota, "first")
    assert [r.pod for r in store.read(quota["metadata"]["name"]).status.reservations] == [
        f"{quota['metadata']['name']}/first"
    ]


def test_a_damaged_state_refuses_and_is_kept(tmp_path: Path) -> None:
    path = tmp_path / "quota-state.json"
    store, service = _service(path)
    quota = _quota(unique_name("mapped"))
    assert _admit(service, quota, "first")
    with open(path, "r+b") as handle:
        mapped = mmap.mmap(handle.fileno(), 0)
        start = HEADER_BYTES + mapped[8] * SLOT
        mapped[start + 2] = mapped[start + 2] ^ 0xFF  # one flipped byte of the active state
        damaged = bytes(mapped[:HEADER_BYTES + 2 * SLOT])
    with pytest.raises(QuotaStateCorrupt):
        store.read(quota["metadata"]["name"])
    with pytest.raises(QuotaUnavailable):
        _admit(service, quota, "second")  # refused at the store: never admitted past a damaged state
    assert path.read_bytes()[:HEADER_BYTES + 2 * SLOT] == damaged  # nothing overwrote it


def test_a_state_too_large_for_a_slot_is_refused(tmp_path: Path) -> None:
    store = MappedQuotaStore(tmp_path / "quota-state.json", slot_bytes=4096)
    service = QuotaService(store, lambda _: None, grace_seconds=600)
    quota = _quota(unique_name("small"))
    admitted = 0
    with pytest.raises(QuotaUnavailable, match="do not fit"):
        for index in range(64):
            _admit(service, {**quota, "spec": {**quota["spec"], "limits": [
                {"acceleratorType": H100, "gpus": 1000}]}}, f"pod-{index}")
            admitted += 1
    assert 0 < admitted < 64


def test_workers_taking_turns_each_see_every_reservation(tmp_path: Path) -> None:
    """A worker keeps the state it parsed last; another worker's write (the bytes differ) makes it parse the
    mapping again, so no reservation is ever counted from a stale copy."""
    path = tmp_path / "quota-state.json"
    first, second = _service(path), _service(path)
    quota = _quota(unique_name("turns"))
    for index in range(8):
        store, service = (first, second)[index % 2]
        assert _admit(service, quota, f"pod-{index}")
        assert len(store.read(quota["metadata"]["name"]).status.reservations) == index + 1
    # The limit is 8 GPUs: whichever worker asks next sees all eight reserved.
    assert not _admit(first[1], quota, "ninth") and not _admit(second[1], quota, "ninth")


def _lock_is_free(path: Path) -> bool:
    """Whether another worker (another open file description) could take the file lock now."""
    with open(f"{path}.lock", "a+b") as other:
        try:
            fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        fcntl.flock(other, fcntl.LOCK_UN)
        return True


def test_a_change_is_worked_out_without_the_file_lock(tmp_path: Path) -> None:
    """Parsing, changing and serialising the state happen before the lock: another worker waits only for
    the comparison and the copy (module doc)."""
    path = tmp_path / "quota-state.json"
    store = MappedQuotaStore(path, slot_bytes=SLOT)
    free: list[bool] = []

    def change(status: QuotaStatus) -> tuple[QuotaStatus, None]:
        free.append(_lock_is_free(path))
        return QuotaStatus((*status.reservations, _reservation(f"r{len(free)}")), status.used), None

    store.transact("team", change, timeout=5)
    store.transact("team", change, timeout=5)
    assert free == [True, True]
    assert [r.id for r in store.read("team").status.reservations] == ["r1", "r2"]


def test_a_change_that_writes_nothing_is_answered_while_another_worker_holds_the_lock(tmp_path: Path) -> None:
    """A refusal (or a kept reservation) needs no lock: a quota check the other worker's transaction would
    have made wait is answered from the state as it is."""
    path = tmp_path / "quota-state.json"
    _store, service = _service(path)
    quota = _quota(unique_name("held"), gpus=1)
    assert _admit(service, quota, "first")
    name = quota["metadata"]["name"]
    with open(f"{path}.lock", "a+b") as other:
        fcntl.flock(other, fcntl.LOCK_EX)
        refused = service.check(charge(name, "second", Decimal(1), H100, uid="uid-second"), name, [quota], [],
                                dry_run=False, deadline=time.monotonic() + 5, wait=False)
        with pytest.raises(WouldBlock):  # a reservation to write still waits for the lock
            service.check(charge(name, "third", Decimal("0.5"), H100, uid="uid-third"), name,
                          [{**quota, "spec": {**quota["spec"], "limits": [{"acceleratorType": H100, "gpus": 2}]}}],
                          [], dry_run=False, deadline=time.monotonic() + 5, wait=False)
        fcntl.flock(other, fcntl.LOCK_UN)
    assert not refused.allowed and "1 of 1 GPUs in use" in refused.message


def test_a_write_between_the_read_and_the_lock_makes_the_change_run_again_on_it(tmp_path: Path) -> None:
    """Another worker reserves while this one works its change out: the change is worked out again on the
    state that holds the other reservation, under the lock, so neither reservation is lost."""
    path = tmp_path / "quota-state.json"
    store, other = MappedQuotaStore(path, slot_bytes=SLOT), MappedQuotaStore(path, slot_bytes=SLOT)
    seen: list[list[str]] = []

    def add(rid: str) -> Any:
        def change(status: QuotaStatus) -> tuple[QuotaStatus, None]:
            return QuotaStatus((*status.reservations, _reservation(rid)), status.used), None
        return change

    def mine(status: QuotaStatus) -> tuple[QuotaStatus, int]:
        seen.append([r.id for r in status.reservations])
        if len(seen) == 1:
            other.transact("team", add("theirs"), timeout=5)  # lands after this worker's read
        return QuotaStatus((*status.reservations, _reservation("mine")), status.used), len(seen)

    assert store.transact("team", mine, timeout=5) == 2
    assert seen == [[], ["theirs"]]
    assert [r.id for r in store.read("team").status.reservations] == ["theirs", "mine"]
    assert [r.id for r in other.read("team").status.reservations] == ["theirs", "mine"]


def test_a_state_half_written_by_another_worker_is_not_reported_corrupt(tmp_path: Path) -> None:
    """The read without the lock may meet another worker's first write half done (the header's magic
    written, its lengths not yet): that is read again under the lock, never reported as damage."""
    path = tmp_path / "quota-state.json"
    store = MappedQuotaStore(path, slot_bytes=SLOT)
    with open(path, "w+b") as handle:
        handle.truncate(HEADER_BYTES + 2 * SLOT)
        mapped = mmap.mmap(handle.fileno(), 0)
        mapped[:8] = MAGIC  # magic, active slot 0, length 0, CRC 0: the first write caught half way
        mapped.flush()
    before = _corrupt_reports()
    assert store._snapshot() is None
    assert _corrupt_reports() == before
    with pytest.raises(QuotaStateCorrupt):  # under the lock, the same header is damage
        store.read("team")
    assert _corrupt_reports() == before + 1


def _corrupt_reports() -> float:
    return REGISTRY.get_sample_value("kgwe_quota_store_errors_total", {"reason": "corrupt"}) or 0.0


def _reservation(rid: str) -> Reservation:
    return Reservation(rid, f"team/{rid}", None, LimitKey("acceleratorType", H100), Decimal(1), None, 1.0e9, 4.0e9)


def _write_other_quota_until(path: str, stop: Any) -> None:
    """Another worker writing the state as fast as it can (a quota nobody in the test checks)."""
    store = MappedQuotaStore(path, slot_bytes=SLOT)
    key = LimitKey("acceleratorType", H100)
    count = 0
    while not stop.is_set():
        count += 1
        used = (UsedEntry(key, Decimal(count)),)
        store.transact("elsewhere", lambda status, used=used: (QuotaStatus(status.reservations, used), None),
                       timeout=5)
    os._exit(0)


def test_a_read_without_the_lock_never_meets_a_state_that_was_never_written(tmp_path: Path) -> None:
    """While another worker writes, the header it rewrites never reads as a file never written (an empty
    state): a check answered without the lock from an empty state would let a dry run through that the
    state refuses, and a give-back would find nothing to give back and write nothing."""
    path = tmp_path / "quota-state.json"
    _store, service = _service(path)
    quota = _quota(unique_name("torn"), gpus=1)
    name = quota["metadata"]["name"]
    assert _admit(service, quota, "first")
    stop = multiprocessing.get_context("fork").Event()
    writer = multiprocessing.get_context("fork").Process(target=_write_other_quota_until, args=(str(path), stop))
    writer.start()
    try:
        checks, wrongly_allowed = 0, 0
        until = time.monotonic() + 3
        while time.monotonic() < until and not wrongly_allowed:
            decision = service.check(charge(name, "second", Decimal(1), H100, uid="uid-second"), name, [quota], [],
                                     dry_run=True, deadline=time.monotonic() + 5)
            checks += 1
            wrongly_allowed += decision.allowed
    finally:
        stop.set()
        writer.join(20)
    assert checks > 1000
    assert wrongly_allowed == 0, f"{wrongly_allowed} of {checks} dry runs were answered from an empty state"


def test_a_reservation_given_back_by_its_admission_is_not_kept_by_a_retry_of_the_same_pod(tmp_path: Path) -> None:
    """An admission of a pod (worker A) reserves in the first of two TenantQuota objects, is refused by the
    second and gives its reservation back; a retry of the same pod (worker B, whose pod list no longer
    shows a finished pod) is admitted in between. The retry must hold a reservation of its own in the first
    object: had it kept A's, A's give-back would take it away, and the first object's limit would be
    exceeded by the next pod (counted from the same pod list)."""
    path = tmp_path / "quota-state.json"
    tenant = unique_name("retry")
    types, profiles = f"{tenant}-a-types", f"{tenant}-b-profiles"  # reserved in this order
    quotas = [
        {"metadata": {"name": types}, "spec": {"tenant": tenant, "namespaces": [tenant],
                                               "limits": [{"acceleratorType": H100, "gpus": 4}]}},
        {"metadata": {"name": profiles}, "spec": {"tenant": tenant, "namespaces": [tenant],
                                                  "limits": [{"profile": "premium", "gpus": 2}]}},
    ]
    pod = charge(tenant, "x", 2, H100, profile="premium", uid="uid-x")
    finished = charge(tenant, "z", 1, H100, profile="premium", uid="uid-z", tenant=tenant)
    worker_b = QuotaService(MappedQuotaStore(path, slot_bytes=SLOT), lambda _: None, grace_seconds=600)
    retried: list[Any] = []

    def clock_a() -> float:
        if len(retried) == 0 and _reservation_count(path, types) == 1:
            # A reserved in the first object and is working out the second: the retry comes now, on B.
            retried.append(worker_b.check(pod, tenant, quotas, [], dry_run=False, deadline=time.monotonic() + 5))
        return time.time()

    worker_a = QuotaService(MappedQuotaStore(path, slot_bytes=SLOT), lambda _: None, grace_seconds=600, clock=clock_a)
    first = worker_a.check(pod, tenant, quotas, [finished], dry_run=False, deadline=time.monotonic() + 5)
    assert not first.allowed and "profile premium" in first.message  # z still runs in A's pod list
    [again] = retried
    assert again.allowed  # B's pod list no longer shows z
    held = MappedQuotaStore(path, slot_bytes=SLOT).read(types).status.reservations
    assert [(r.pod_uid, r.gpus) for r in held] == [("uid-x", 2)]
    # x holds 2 of the 4 H100s until the pod list shows it: a 3-GPU pod does not fit.
    other = charge(tenant, "y", 3, H100, uid="uid-y")
    assert not worker_b.check(other, tenant, quotas, [], dry_run=False, deadline=time.monotonic() + 5).allowed


def _reservation_count(path: Path, quota: str) -> int:
    return len(MappedQuotaStore(path, slot_bytes=SLOT).read(quota).status.reservations)


@pytest.mark.parametrize("damage", ["magic", "header"])
def test_a_header_zeroed_by_damage_is_not_taken_for_a_file_never_written(tmp_path: Path, damage: str) -> None:
    """A file never written is all zeros; a header zeroed over written states (its magic, or all of it) is
    damage: refused, and the reservations in the slots are never overwritten with a new state."""
    path = tmp_path / "quota-state.json"
    store, service = _service(path)
    quota = _quota(unique_name("zeroed"))
    assert _admit(service, quota, "first") and _admit(service, quota, "second")  # both slots written
    with open(path, "r+b") as handle:
        mapped = mmap.mmap(handle.fileno(), 0)
        mapped[:8 if damage == "magic" else HEADER_BYTES] = bytes(8 if damage == "magic" else HEADER_BYTES)
        damaged = bytes(mapped[:HEADER_BYTES + 2 * SLOT])
    with pytest.raises(QuotaStateCorrupt):
        store.read(quota["metadata"]["name"])
    with pytest.raises(QuotaUnavailable):
        _admit(service, quota, "second")
    assert path.read_bytes()[:HEADER_BYTES + 2 * SLOT] == damaged


def test_a_give_back_puts_back_the_reservation_of_the_same_pod_it_replaced(tmp_path: Path) -> None:
    """Three TenantQuota objects: a retry of a pod (worker B) reserves in all three and is admitted while the
    first admission of the pod (worker A) is between its first and second object; A then replaces B's
    reservation in the second object with its own and is refused by the third (its pod list still shows a
    finished pod). A's give-back must put B's reservation back, not leave the second object without one:
    the next pod would be admitted past its limit."""
    path = tmp_path / "quota-state.json"
    tenant = unique_name("replaced")
    first_object, second_object, third_object = (f"{tenant}-{letter}" for letter in "abc")  # reserved in order

    def quota(name: str, limit: dict[str, Any]) -> dict[str, Any]:
        return {"metadata": {"name": name}, "spec": {"tenant": tenant, "namespaces": [tenant], "limits": [limit]}}

    quotas = [quota(first_object, {"acceleratorType": H100, "gpus": 8}),
              quota(second_object, {"profile": "premium", "gpus": 4}),
              quota(third_object, {"acceleratorType": H100, "gpus": 2})]
    pod = charge(tenant, "x", 2, H100, profile="premium", uid="uid-x")
    finished = charge(tenant, "z", 1, H100, uid="uid-z", tenant=tenant)
    worker_b = QuotaService(MappedQuotaStore(path, slot_bytes=SLOT), lambda _: None, grace_seconds=600)
    retried: list[Any] = []

    def clock_a() -> float:
        if not retried and _reservation_count(path, first_object) == 1 \
                and _reservation_count(path, second_object) == 0:
            retried.append(worker_b.check(pod, tenant, quotas, [], dry_run=False, deadline=time.monotonic() + 5))
        return time.time()

    worker_a = QuotaService(MappedQuotaStore(path, slot_bytes=SLOT), lambda _: None, grace_seconds=600, clock=clock_a)
    first = worker_a.check(pod, tenant, quotas, [finished], dry_run=False, deadline=time.monotonic() + 5)
    assert not first.allowed and "1 of 2 GPUs in use" in first.message
    [again] = retried
    assert again.allowed
    store = MappedQuotaStore(path, slot_bytes=SLOT)
    for name in (first_object, second_object, third_object):
        assert [(r.id, r.pod_uid) for r in store.read(name).status.reservations] == [(again.reservation_id, "uid-x")]
    # x holds 2 of the 4 premium GPUs: a 3-GPU premium pod (on A100s: the second object only) does not fit.
    other = charge(tenant, "y", 3, "nvidia-a100-80gb", profile="premium", uid="uid-y")
    assert not worker_b.check(other, tenant, quotas, [], dry_run=False, deadline=time.monotonic() + 5).allowed


def test_workers_follow_the_state_file_moved_aside(tmp_path: Path) -> None:
    """The documented recovery (move the file aside) reaches the workers already running: each goes on with
    the file now at the path, the one a worker started since maps too, never with the one moved away (a
    damaged file would refuse every check for ever; a whole one would let each worker count only the
    reservations in its own file)."""
    path = tmp_path / "quota-state.json"
    running, running_service = _service(path)
    quota = _quota(unique_name("moved"), gpus=2)
    name = quota["metadata"]["name"]
    assert _admit(running_service, quota, "before")
    os.rename(path, tmp_path / "quota-state.json.aside")
    _started, started_service = _service(path)
    assert _admit(started_service, quota, "first") and _admit(started_service, quota, "second")
    assert not _admit(running_service, quota, "third")  # the file at the path is full
    assert sorted(r.pod for r in running.read(name).status.reservations) == [f"{name}/first", f"{name}/second"]
    # A damaged file moved aside: the running worker refused while it was there, and admits again after.
    with open(path, "r+b") as handle:
        mapped = mmap.mmap(handle.fileno(), 0)
        mapped[HEADER_BYTES + mapped[8] * SLOT + 2] ^= 0xFF
        mapped.close()
    with pytest.raises(QuotaUnavailable):
        _admit(running_service, quota, "fourth")
    os.rename(path, tmp_path / "quota-state.json.damaged")
    assert _admit(running_service, quota, "fourth")
