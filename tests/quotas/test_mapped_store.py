"""The workers' shared mapping (policies/quota/mapped_store.py): a worker that dies mid-write leaves the
last state whole; a damaged state refuses every check and is never overwritten."""

from __future__ import annotations

import mmap
import multiprocessing
import os
import time
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from quota_fixtures import charge, unique_name

from policies.quota.check import QuotaService
from policies.quota.file_store import QuotaStateCorrupt
from policies.quota.mapped_store import HEADER_BYTES, MappedQuotaStore
from policies.quota.store import QuotaUnavailable

H100 = "nvidia-h100-80gb"
SLOT = 1 << 20


def _service(path: Path) -> tuple[MappedQuotaStore, QuotaService]:
    store = MappedQuotaStore(path, slot_bytes=SLOT)
    return store, QuotaService(store, lambda _: None, grace_seconds=600)


def _quota(name: str) -> dict[str, Any]:
    return {"apiVersion": "kgwe.io/v1alpha1", "kind": "TenantQuota", "metadata": {"name": name},
            "spec": {"tenant": name, "namespaces": [name], "limits": [{"acceleratorType": H100, "gpus": 8}]}}


def _admit(service: QuotaService, quota: dict[str, Any], pod: str) -> bool:
    name = quota["metadata"]["name"]
    return service.check(charge(name, pod, Decimal(1), H100, uid=f"uid-{pod}"), name, [quota], [], dry_run=False,
                         deadline=time.monotonic() + 5).allowed


def _die_mid_write(path: str) -> None:
    """A worker killed while copying a new state into the inactive slot (before the index flips)."""
    with open(path, "r+b") as handle:
        mapped = mmap.mmap(handle.fileno(), 0)
        active = mapped[8]
        start = HEADER_BYTES + (1 - active) * SLOT
        mapped[start:start + 64] = b"\xff" * 64  # half a document
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
    """A worker keeps the state it parsed last; another worker's write (the write counter moves) makes it
    read the mapping again, so no reservation is ever counted from a stale copy."""
    path = tmp_path / "quota-state.json"
    first, second = _service(path), _service(path)
    quota = _quota(unique_name("turns"))
    for index in range(8):
        store, service = (first, second)[index % 2]
        assert _admit(service, quota, f"pod-{index}")
        assert len(store.read(quota["metadata"]["name"]).status.reservations) == index + 1
    # The limit is 8 GPUs: whichever worker asks next sees all eight reserved.
    assert not _admit(first[1], quota, "ninth") and not _admit(second[1], quota, "ninth")
