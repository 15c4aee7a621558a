"""Many admissions at once, from several webhook replicas, never take a tenant over its limit.

Each replica is its own QuotaService and store client; none of the admitted pods is in any pod list yet, so
the reservations in the store are all that stands between the racing admissions and an overcommit.
"""

from __future__ import annotations

import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from decimal import Decimal
from typing import Any

import pytest
from quota_fixtures import charge, unique_name

from policies.quota.check import QuotaDecision, QuotaService

H100 = "nvidia-h100-80gb"
REPLICAS = 4
ADMISSIONS = 48
LIMIT = 10


def run_admissions(backend: Any, asks: list[Decimal]) -> tuple[str, list[tuple[Decimal, QuotaDecision]]]:
    name = unique_name("race")
    quota = {
        "apiVersion": "kgwe.io/v1alpha1",
        "kind": "TenantQuota",
        "metadata": {"name": name},
        "spec": {"tenant": name, "namespaces": [name], "limits": [{"acceleratorType": H100, "gpus": LIMIT}]},
    }
    backend.add(quota)
    replicas = [QuotaService(backend.new_store(), lambda _: None, grace_seconds=600) for _ in range(REPLICAS)]
    start = threading.Barrier(len(asks))

    def admit(index: int) -> tuple[Decimal, QuotaDecision]:
        pod = charge(name, f"pod-{index}", asks[index], H100, uid=f"uid-{index}")
        start.wait()
        decision = replicas[index % REPLICAS].check(
            pod, name, [quota], [], dry_run=False, deadline=time.monotonic() + 60
        )
        return asks[index], decision

    with ThreadPoolExecutor(max_workers=len(asks)) as pool:
        results = list(pool.map(admit, range(len(asks))))
    return name, results


def reserved_gpus(backend: Any, name: str) -> Decimal:
    return sum((r.gpus for r in backend.new_store().read(name).status.reservations), Decimal(0))


def test_parallel_admissions_take_exactly_the_free_gpus(store_backend: Any) -> None:
    name, results = run_admissions(store_backend, [Decimal(1)] * ADMISSIONS)
    admitted = [ask for ask, decision in results if decision.allowed]
    assert sum(admitted) == LIMIT  # every free GPU is taken, and not one more
    assert reserved_gpus(store_backend, name) == LIMIT
    refused = [decision.message for _, decision in results if not decision.allowed]
    assert len(refused) == ADMISSIONS - LIMIT
    assert all(f"of {LIMIT} GPUs in use, this pod asks for 1" in message for message in refused)


def test_parallel_admissions_of_mixed_sizes_never_exceed_the_limit(store_backend: Any) -> None:
    sizes = random.Random(7)
    asks = [Decimal(sizes.choice(["0.25", "1", "2", "3", "1"])) for _ in range(ADMISSIONS)]
    name, results = run_admissions(store_backend, asks)
    admitted = sum((ask for ask, decision in results if decision.allowed), Decimal(0))
    assert admitted <= LIMIT
    assert reserved_gpus(store_backend, name) == admitted
    # A pod was refused only because the GPUs it asked for were no longer free.
    smallest_refused = min((ask for ask, decision in results if not decision.allowed), default=None)
    assert smallest_refused is None or admitted + smallest_refused > LIMIT


def _worker_admissions(
    path: str, name: str, quota: dict[str, Any], worker: int, count: int, results: Any, mapped: bool
) -> None:
    from policies.quota.file_store import FileQuotaStore
    from policies.quota.mapped_store import MappedQuotaStore

    store = MappedQuotaStore(path, slot_bytes=1 << 20) if mapped else FileQuotaStore(path, durable=False)
    service = QuotaService(store, lambda _: None, grace_seconds=600)
    allowed = 0
    for index in range(count):
        pod = charge(name, f"w{worker}-pod-{index}", Decimal(1), H100, uid=f"w{worker}-uid-{index}")
        if service.check(pod, name, [quota], [], dry_run=False, deadline=time.monotonic() + 60).allowed:
            allowed += 1
    results.put(allowed)


@pytest.mark.parametrize("mapped", [False, True], ids=["file", "mapped"])
def test_worker_processes_sharing_the_state_file_never_exceed_the_limit(tmp_path: Any, mapped: bool) -> None:
    """`kgwe serve`'s workers are processes, each with its own store on one file (or one shared mapping):
    their one-lock transactions (read, change, write) never lose a reservation to each other."""
    import multiprocessing

    name = unique_name("workers")
    quota = {
        "apiVersion": "kgwe.io/v1alpha1", "kind": "TenantQuota", "metadata": {"name": name},
        "spec": {"tenant": name, "namespaces": [name], "limits": [{"acceleratorType": H100, "gpus": 40}]},
    }
    context = multiprocessing.get_context("fork")
    results = context.Queue()
    path = str(tmp_path / "quota-state.json")
    workers = [
        context.Process(target=_worker_admissions, args=(path, name, quota, worker, 30, results, mapped))
        for worker in range(3)
    ]
    for process in workers:
        process.start()
    admitted = [results.get(timeout=120) for _ in workers]
    for process in workers:
        process.join(timeout=30)
        assert process.exitcode == 0
    assert sum(admitted) == 40  # 90 asked for one GPU each; exactly the limit was taken
    from policies.quota.file_store import FileQuotaStore
    from policies.quota.mapped_store import MappedQuotaStore

    reader = MappedQuotaStore(path, slot_bytes=1 << 20) if mapped else FileQuotaStore(path)
    reservations = reader.read(name).status.reservations
    assert len(reservations) == 40
    assert len({r.pod for r in reservations}) == 40
