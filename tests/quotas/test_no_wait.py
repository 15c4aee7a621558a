"""Quota reservations asked not to wait (`wait=False`), as `/validate` asks first on the event loop.

Made at once when the store's lock is free; otherwise `WouldBlock` and nothing reserved, so the same
check can run again on a thread, where it may wait.
"""

from __future__ import annotations

import asyncio
import fcntl
import threading
import time
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from quota_fixtures import charge, unique_name

from policies.api import WouldBlock
from policies.quota.check import QuotaService
from policies.quota.file_store import FileQuotaStore
from policies.quota.store import InMemoryQuotaStore
from webhook.admission.facts import Problem
from webhook.admission.validate import Gate, _try_on_loop

H100 = "nvidia-h100-80gb"


def _quota(name: str, gpus: int = 4) -> dict[str, Any]:
    return {"apiVersion": "kgwe.io/v1alpha1", "kind": "TenantQuota", "metadata": {"name": name},
            "spec": {"tenant": name, "namespaces": [name], "limits": [{"acceleratorType": H100, "gpus": gpus}]}}


def _check(service: QuotaService, quotas: list[dict[str, Any]], pod: str, *, wait: bool) -> Any:
    name = quotas[0]["spec"]["tenant"]
    return service.check(charge(name, pod, Decimal(1), H100, uid=f"uid-{pod}"), name, quotas, [], dry_run=False,
                         deadline=time.monotonic() + 5, wait=wait)


def test_a_free_file_lock_reserves_at_once_and_a_held_one_reserves_nothing(tmp_path: Path) -> None:
    store = FileQuotaStore(tmp_path / "quota-state.json", durable=False)
    service = QuotaService(store, lambda _: None, grace_seconds=600)
    quota = _quota(unique_name("nowait"))
    name = quota["metadata"]["name"]
    assert _check(service, [quota], "first", wait=False).allowed
    assert [r.pod for r in store.read(name).status.reservations] == [f"{name}/first"]
    # Another worker (another open file description) holds the lock.
    with open(tmp_path / "quota-state.json.lock", "a+b") as other:
        fcntl.flock(other, fcntl.LOCK_EX)
        with pytest.raises(WouldBlock):
            _check(service, [quota], "second", wait=False)
        fcntl.flock(other, fcntl.LOCK_UN)
    assert [r.pod for r in store.read(name).status.reservations] == [f"{name}/first"]
    # Where waiting is allowed the same check goes through.
    assert _check(service, [quota], "second", wait=True).allowed
    assert len(store.read(name).status.reservations) == 2


def test_a_lock_held_by_another_thread_of_the_worker_reserves_nothing() -> None:
    store = InMemoryQuotaStore()
    service = QuotaService(store, lambda _: None, grace_seconds=600)
    quota = _quota(unique_name("nowait"))
    held, release = threading.Event(), threading.Event()

    def hold(status: Any) -> tuple[None, None]:
        held.set()
        release.wait(10)
        return None, None

    holder = threading.Thread(target=lambda: store.transact(quota["metadata"]["name"], hold, timeout=None))
    holder.start()
    held.wait(10)
    try:
        with pytest.raises(WouldBlock):
            _check(service, [quota], "pod", wait=False)
    finally:
        release.set()
        holder.join(10)
    assert store.read(quota["metadata"]["name"]).status.reservations == ()
    assert _check(service, [quota], "pod", wait=False).allowed


def test_two_tenant_quotas_are_reserved_only_where_waiting_is_allowed() -> None:
    store = InMemoryQuotaStore()
    service = QuotaService(store, lambda _: None, grace_seconds=600)
    tenant = unique_name("two")
    first, second = _quota(tenant), _quota(tenant)
    first["metadata"]["name"], second["metadata"]["name"] = f"{tenant}-a", f"{tenant}-b"
    with pytest.raises(WouldBlock):
        _check(service, [first, second], "pod", wait=False)
    assert store.read(f"{tenant}-a").status.reservations == ()
    assert _check(service, [first, second], "pod", wait=True).allowed


def test_a_lock_held_for_a_moment_says_so_and_a_multi_quota_check_does_not(tmp_path: Path) -> None:
    """`WouldBlock.soon` tells the event loop whether asking again in a moment is worth it."""
    store = FileQuotaStore(tmp_path / "quota-state.json", durable=False)
    service = QuotaService(store, lambda _: None, grace_seconds=600)
    quota = _quota(unique_name("soon"))
    with open(tmp_path / "quota-state.json.lock", "a+b") as other:
        fcntl.flock(other, fcntl.LOCK_EX)
        with pytest.raises(WouldBlock) as held:
            _check(service, [quota], "pod", wait=False)
        fcntl.flock(other, fcntl.LOCK_UN)
    assert held.value.soon
    tenant = unique_name("two")
    first, second = _quota(tenant), _quota(tenant)
    first["metadata"]["name"], second["metadata"]["name"] = f"{tenant}-a", f"{tenant}-b"
    with pytest.raises(WouldBlock) as several:
        _check(service, [first, second], "pod", wait=False)
    assert not several.value.soon


def _quota_gate(service: QuotaService, quota: dict[str, Any], pod: str) -> Gate:
    def check(deadline: float | None, wait: bool) -> list[Problem]:
        decision = _check(service, [quota], pod, wait=wait)
        return [] if decision.allowed else [("quota", decision.message)]

    return Gate("quota", lambda d: check(d, True), blocking=True, try_now=lambda d: check(d, False))


def test_the_event_loop_asks_again_while_another_worker_holds_the_lock_a_moment(tmp_path: Path) -> None:
    """Another worker's transaction holds the file lock for ~1 ms: the check is answered on the event loop
    after a pause, not handed to a thread."""
    store = FileQuotaStore(tmp_path / "quota-state.json", durable=False)
    service = QuotaService(store, lambda _: None, grace_seconds=600)
    quota = _quota(unique_name("retry"))
    gate = _quota_gate(service, quota, "pod")

    async def scenario() -> list[Problem] | None:
        with open(tmp_path / "quota-state.json.lock", "a+b") as other:
            fcntl.flock(other, fcntl.LOCK_EX)
            asyncio.get_running_loop().call_later(0.001, fcntl.flock, other, fcntl.LOCK_UN)
            return await _try_on_loop(gate, time.monotonic() + 5)

    assert asyncio.run(scenario()) == []
    assert [r.pod for r in store.read(quota["metadata"]["name"]).status.reservations] == [
        f"{quota['metadata']['name']}/pod"
    ]


def test_a_lock_held_past_the_pauses_or_the_deadline_goes_to_a_thread(tmp_path: Path) -> None:
    store = FileQuotaStore(tmp_path / "quota-state.json", durable=False)
    service = QuotaService(store, lambda _: None, grace_seconds=600)
    quota = _quota(unique_name("held"))
    gate = _quota_gate(service, quota, "pod")

    async def scenario(deadline: float) -> list[Problem] | None:
        with open(tmp_path / "quota-state.json.lock", "a+b") as other:
            fcntl.flock(other, fcntl.LOCK_EX)
            try:
                return await _try_on_loop(gate, deadline)
            finally:
                fcntl.flock(other, fcntl.LOCK_UN)

    assert asyncio.run(scenario(time.monotonic() + 5)) is None
    assert asyncio.run(scenario(time.monotonic())) is None  # no time to pause at all
    assert store.read(quota["metadata"]["name"]).status.reservations == ()
