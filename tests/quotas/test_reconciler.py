"""The reconciler keeps each TenantQuota's status true to the pods and drops spent reservations."""

from __future__ import annotations

import time
from typing import Any

from prometheus_client import REGISTRY
from quota_fixtures import TenantQuotaEndpoint, charge

from policies.quota.check import QuotaService
from policies.quota.model import LimitKey
from policies.quota.reconciler import QuotaReconciler
from policies.quota.store import InMemoryQuotaStore

H100 = "nvidia-h100-80gb"
GB200 = "nvidia-gb200-186gb"


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


def test_status_used_follows_the_pods(tenantquota_endpoint: TenantQuotaEndpoint, example_quotas: list[dict[str, Any]],
                                      price_of: Any) -> None:
    for quota in example_quotas:
        tenantquota_endpoint.add(quota)
    reconciler = QuotaReconciler(tenantquota_endpoint.new_store(), price_of)
    pods = [
        charge("team-a", "train", 4, H100, bound=H100, tenant="team-a"),
        charge("ml-research", "a", 4, H100, bound=H100, profile="premium-h100", tenant="ml-research", memory_gi=320),
        charge("default", "b", 8, GB200, tenant="ml-research"),
        charge("inference", "c", 1, H100, bound=H100, tenant="inference"),  # a tenant without quota
    ]
    reconciler.reconcile_once(example_quotas, pods)
    team_a = tenantquota_endpoint.objects["team-a"]["status"]["used"]
    assert team_a == [{"acceleratorType": "nvidia-a100-80gb", "gpus": 0}, {"acceleratorType": H100, "gpus": 4}]
    ml = tenantquota_endpoint.objects["ml-research"]["status"]["used"]
    assert ml == [
        {"acceleratorType": GB200, "gpus": 8},
        {"acceleratorType": H100, "gpus": 4},
        {"profile": "premium-h100", "gpus": 4, "gpuMemory": "320Gi"},
    ]
    sample = REGISTRY.get_sample_value
    assert sample("kgwe_quota_used", {"tenant": "ml-research", "type": GB200}) == 8
    assert sample("kgwe_quota_limit", {"tenant": "team-a", "type": H100}) == 8

    # The training pod finished: the next pass shows it, and writes nothing when nothing changed.
    reconciler.reconcile_once(example_quotas, pods[1:])
    assert tenantquota_endpoint.objects["team-a"]["status"]["used"][1] == {"acceleratorType": H100, "gpus": 0}
    writes = sum(1 for method, _ in tenantquota_endpoint.requests if method == "PUT")
    reconciler.reconcile_once(example_quotas, pods[1:])
    assert sum(1 for method, _ in tenantquota_endpoint.requests if method == "PUT") == writes


def test_spent_reservations_are_dropped(example_quotas: list[dict[str, Any]], price_of: Any) -> None:
    quotas = [q for q in example_quotas if q["spec"]["tenant"] == "team-a"]
    store, clock = InMemoryQuotaStore(), Clock()
    service = QuotaService(store, price_of, grace_seconds=60, clock=clock)
    reconciler = QuotaReconciler(store, price_of, settle_seconds=10, clock=clock)
    for name in ("seen", "never", "pending"):
        assert service.check(charge("team-a", name, 2, H100, uid=f"uid-{name}"), "team-a", quotas, [],
                             dry_run=False, deadline=time.monotonic() + 5).allowed

    def reservations() -> list[str]:
        return sorted(r.pod for r in store.read("team-a").status.reservations)

    seen = [charge("team-a", "seen", 2, H100, uid="uid-seen", tenant="team-a")]
    # Just seen: kept a little longer, so that replicas whose pod list lags still count the pod.
    reconciler.reconcile_once(quotas, seen)
    assert reservations() == ["team-a/never", "team-a/pending", "team-a/seen"]
    clock.now += 11
    reconciler.reconcile_once(quotas, seen)
    assert reservations() == ["team-a/never", "team-a/pending"]
    # Never backed by a pod: gone after the grace period.
    clock.now += 50
    reconciler.reconcile_once(quotas, seen)
    assert reservations() == []
    assert store.read("team-a").status.used[1].key == LimitKey("acceleratorType", H100)
    assert store.read("team-a").status.used[1].gpus == 2


def test_an_unreachable_store_is_logged_not_raised(example_quotas: list[dict[str, Any]], price_of: Any,
                                                  caplog: Any) -> None:
    gone = TenantQuotaEndpoint()
    gone.server.server_close()
    reconciler = QuotaReconciler(gone.new_store(), price_of, timeout_seconds=1)
    reconciler.reconcile_once(example_quotas, [])
    assert "not reconciled" in caplog.text
