"""Quota reservations asked not to wait (`wait=False`), as `/validate` asks first on the event loop.

Made at once when the store's lock is free; otherwise `WouldBlock` and nothing reserved, so the same
check can run again on a thread, where it may wait.
"""

from __future__ import annotations

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
