"""The admission-time quota check: limits, usage from pods and reservations, messages, dry runs."""

from __future__ import annotations

import time
from decimal import Decimal
from typing import Any

import pytest
from prometheus_client import REGISTRY
from quota_fixtures import charge

from policies.quota.check import QuotaService
from policies.quota.model import LimitKey, PodCharge, resolve_tenant
from policies.quota.store import InMemoryQuotaStore, QuotaStatus, QuotaUnavailable, Versioned

H100 = "nvidia-h100-80gb"
A100 = "nvidia-a100-80gb"
L4 = "nvidia-l4-24gb"
GB200 = "nvidia-gb200-186gb"


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


class CountingStore(InMemoryQuotaStore):
    """The in-memory store, counting how often admission reaches it."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def read(self, quota: str, *, timeout: float | None = None) -> Versioned:
        self.calls += 1
        return super().read(quota, timeout=timeout)

    def write(self, quota: str, status: QuotaStatus, version: str, *, timeout: float | None = None) -> bool:
        self.calls += 1
        return super().write(quota, status, version, timeout=timeout)

    def transact(self, quota: str, change: Any, *, timeout: float | None) -> Any:
        self.calls += 1
        return super().transact(quota, change, timeout=timeout)


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def store() -> CountingStore:
    return CountingStore()


@pytest.fixture
def service(store: CountingStore, price_of: Any, clock: Clock) -> QuotaService:
    return QuotaService(store, price_of, grace_seconds=60, clock=clock)


def team_a(quotas: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [q for q in quotas if q["spec"]["tenant"] == "team-a"]


def ml_research(quotas: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [q for q in quotas if q["spec"]["tenant"] == "ml-research"]


def admit(service: QuotaService, pod: PodCharge, tenant: str, quotas: list[dict[str, Any]],
          pods: list[PodCharge] | None = None, *, dry_run: bool = False) -> Any:
    return service.check(pod, tenant, quotas, pods or [], dry_run=dry_run, deadline=time.monotonic() + 5)


def refusals() -> float:
    return REGISTRY.get_sample_value("kgwe_admission_refusals_total", {"reason": "quota"}) or 0.0


def test_under_quota_is_admitted_and_reserved(service: QuotaService, store: CountingStore,
                                              example_quotas: list[dict[str, Any]]) -> None:
    running = [charge("team-a", "train-0", 4, H100, bound=H100, tenant="team-a")]
    decision = admit(service, charge("team-a", "new", 4, H100), "team-a", team_a(example_quotas), running)
    assert decision.allowed
    assert decision.reservation_id
    reservations = store.read("team-a").status.reservations
    assert [(r.pod, r.key, r.gpus) for r in reservations] == [("team-a/new", LimitKey("acceleratorType", H100), 4)]


def test_over_quota_is_refused_with_tenant_type_used_limit_and_ask(
    service: QuotaService, store: CountingStore, example_quotas: list[dict[str, Any]]
) -> None:
    running = [
        charge("team-a", "train-0", 4, H100, bound=H100, tenant="team-a"),
        charge("team-a", "train-1", 2, H100, tenant="team-a"),
    ]
    before = refusals()
    decision = admit(service, charge("team-a", "big", 4, H100), "team-a", team_a(example_quotas), running)
    assert not decision.allowed
    assert decision.message == "tenant team-a: nvidia-h100-80gb 6 of 8 GPUs in use, this pod asks for 4"
    assert decision.reservation_id is None
    assert store.read("team-a").status.reservations == ()
    assert refusals() == before + 1


def test_exactly_at_the_limit_is_admitted(service: QuotaService, example_quotas: list[dict[str, Any]]) -> None:
    running = [charge("team-a", "train-0", 6, H100, bound=H100, tenant="team-a")]
    assert admit(service, charge("team-a", "p", 2, H100), "team-a", team_a(example_quotas), running).allowed


def test_pods_of_other_tenants_do_not_count(service: QuotaService, example_quotas: list[dict[str, Any]]) -> None:
    others = [
        charge("ml-research", "r0", 8, H100, bound=H100, tenant="ml-research"),
        charge("default", "by-group", 8, H100, tenant="ml-research"),  # a group-based pod outside team-a
        charge("ml-research", "legacy", 8, H100, bound=H100),  # no tenant annotation: its namespace decides
    ]
    decision = admit(service, charge("team-a", "p", 8, H100), "team-a", team_a(example_quotas), others)
    assert decision.allowed


def test_several_limits_on_one_tenant(service: QuotaService, example_quotas: list[dict[str, Any]]) -> None:
    quotas = ml_research(example_quotas)
    running = [
        charge("ml-research", "h", 14, H100, bound=H100, tenant="ml-research"),
        charge("ml-research", "g", 10, GB200, bound=GB200, tenant="ml-research"),
    ]
    # Each type has its own limit: 2 more H100s fit, 3 do not; GB200 still has room for 6.
    assert admit(service, charge("ml-research", "a", 2, H100), "ml-research", quotas, running).allowed
    running.append(charge("ml-research", "a", 2, H100, tenant="ml-research"))
    refused = admit(service, charge("ml-research", "b", 1, H100), "ml-research", quotas, running)
    assert refused.message == "tenant ml-research: nvidia-h100-80gb 16 of 16 GPUs in use, this pod asks for 1"
    assert admit(service, charge("ml-research", "c", 6, GB200), "ml-research", quotas, running).allowed
    # Types the tenant has no limit for are not limited.
    assert admit(service, charge("ml-research", "d", 64, L4), "ml-research", quotas, running).allowed


def test_profile_limit_counts_pods_of_that_profile(service: QuotaService,
                                                  example_quotas: list[dict[str, Any]]) -> None:
    quotas = ml_research(example_quotas)
    running = [charge("ml-research", f"p{i}", 4, H100, profile="premium-h100", tenant="ml-research") for i in range(2)]
    # 8 of 16 H100s and 8 of 12 premium-h100 GPUs are in use: the profile limit is the one that bites.
    refused = admit(service, charge("ml-research", "x", 6, H100, profile="premium-h100"), "ml-research", quotas,
                    running)
    assert refused.message == "tenant ml-research: profile premium-h100 8 of 12 GPUs in use, this pod asks for 6"
    # The same GPUs without the profile only meet the type limit.
    assert admit(service, charge("ml-research", "y", 6, H100), "ml-research", quotas, running).allowed


def test_profile_gpu_memory_limit(service: QuotaService, example_quotas: list[dict[str, Any]]) -> None:
    quotas = ml_research(example_quotas)
    running = [charge("ml-research", "m", 10, H100, profile="premium-h100", tenant="ml-research", memory_gi=900)]
    refused = admit(service, charge("ml-research", "n", 1, H100, profile="premium-h100", memory_gi=80),
                    "ml-research", quotas, running)
    assert refused.message == (
        "tenant ml-research: profile premium-h100 900Gi of 960Gi GPU memory in use, this pod asks for 80Gi"
    )


def test_group_based_tenant(service: QuotaService, example_quotas: list[dict[str, Any]]) -> None:
    tenant, quotas = resolve_tenant("default", {}, ["system:authenticated", "ml-researchers"], example_quotas)
    assert tenant == "ml-research"
    # Pods charged to ml-research by group count wherever they run; a pod of `default` charged elsewhere does not.
    running = [
        charge("ml-research", "a", 8, H100, bound=H100, tenant="ml-research"),
        charge("sandbox", "b", 6, H100, bound=H100, tenant="ml-research"),
        charge("default", "c", 8, H100, bound=H100, tenant="default"),
    ]
    refused = admit(service, charge("default", "nb", 4, H100, tenant="ml-research"), tenant, quotas, running)
    assert refused.message == "tenant ml-research: nvidia-h100-80gb 14 of 16 GPUs in use, this pod asks for 4"
    assert admit(service, charge("default", "nb", 2, H100, tenant="ml-research"), tenant, quotas, running).allowed


def test_several_candidate_types_count_against_the_most_expensive_until_bound(
    service: QuotaService, example_quotas: list[dict[str, Any]]
) -> None:
    quotas = team_a(example_quotas)
    full_h100 = [charge("team-a", "t", 8, H100, bound=H100, tenant="team-a")]
    flexible = charge("team-a", "f", 1, A100, H100)
    refused = admit(service, flexible, "team-a", quotas, full_h100)
    assert refused.message == (
        "tenant team-a: nvidia-h100-80gb 8 of 8 GPUs in use, this pod asks for 1 "
        "(counted against nvidia-h100-80gb, the most expensive type it may run on, until it is bound)"
    )
    # Once bound to an A100, an existing flexible pod counts against the A100 limit only.
    bound_flexible = [*full_h100, charge("team-a", "g", 2, A100, H100, bound=A100, tenant="team-a")]
    assert not admit(service, charge("team-a", "h", 1, A100), "team-a", quotas, bound_flexible).allowed
    pending_flexible = [*full_h100[:0], charge("team-a", "g", 2, A100, H100, tenant="team-a")]
    assert admit(service, charge("team-a", "h", 2, A100), "team-a", quotas, pending_flexible).allowed


def test_fractional_gpus_add_up(service: QuotaService) -> None:
    quotas = [{"metadata": {"name": "inf"}, "spec": {"tenant": "inf", "namespaces": ["inference"],
                                                     "limits": [{"acceleratorType": A100, "gpus": "1"}]}}]
    seventh = Decimal(1) / 7
    running = [charge("inference", f"nb{i}", seventh * 3, A100, bound=A100, tenant="inf") for i in range(2)]
    assert admit(service, charge("inference", "x", seventh, A100), "inf", quotas, running).allowed
    refused = admit(service, charge("inference", "y", seventh, A100), "inf", quotas, running)
    assert refused.message == (
        "tenant inf: nvidia-a100-80gb 1 of 1 GPUs in use, this pod asks for 0.14; 0.14 of these GPUs are reserved "
        "for 1 pod admitted in the last 60 s that the pod list does not show yet (quotas.reservationGraceSeconds)"
    )


def test_no_store_access_for_pods_that_hit_no_limit(service: QuotaService, store: CountingStore,
                                                   example_quotas: list[dict[str, Any]]) -> None:
    quotas = team_a(example_quotas)
    assert admit(service, charge("team-a", "l4", 4, L4), "team-a", quotas).allowed
    assert admit(service, charge("team-a", "prof", 1, L4, profile="shared-l4"), "team-a", quotas).allowed
    assert admit(service, charge("team-a", "none", 0, H100), "team-a", quotas).allowed
    assert admit(service, charge("team-a", "free", 8, H100), "team-a", []).allowed
    assert store.calls == 0
    assert admit(service, charge("team-a", "h", 1, H100), "team-a", quotas).allowed
    assert store.calls > 0


def test_dry_run_checks_but_never_writes(service: QuotaService, store: CountingStore,
                                         example_quotas: list[dict[str, Any]]) -> None:
    quotas = team_a(example_quotas)
    before = store.read("team-a").version
    decision = admit(service, charge("team-a", "d", 8, H100), "team-a", quotas, dry_run=True)
    assert decision.allowed and decision.reservation_id is None
    assert not admit(service, charge("team-a", "e", 9, H100), "team-a", quotas, dry_run=True).allowed
    assert store.read("team-a").version == before


def test_reservations_hold_gpus_until_the_pod_appears_or_the_grace_period_ends(
    service: QuotaService, clock: Clock, example_quotas: list[dict[str, Any]]
) -> None:
    quotas = team_a(example_quotas)
    assert admit(service, charge("team-a", "a", 6, H100, uid="u-a"), "team-a", quotas).allowed
    # Not yet in the pod list: the reservation stands in for it.
    refused = admit(service, charge("team-a", "b", 4, H100), "team-a", quotas)
    assert refused.message.startswith("tenant team-a: nvidia-h100-80gb 6 of 8 GPUs in use, this pod asks for 4; ")
    # In the pod list: counted once, not twice.
    visible = [charge("team-a", "a", 6, H100, uid="u-a", tenant="team-a")]
    assert admit(service, charge("team-a", "c", 2, H100), "team-a", quotas, visible).allowed
    # A pod that never appeared (refused later by another admission plugin) frees its GPUs after the grace period.
    clock.now += 61
    assert admit(service, charge("team-a", "d", 8, H100), "team-a", quotas).allowed


def test_admitting_the_same_pod_again_replaces_its_reservation(
    service: QuotaService, store: CountingStore, example_quotas: list[dict[str, Any]]
) -> None:
    quotas = team_a(example_quotas)
    for _ in range(3):
        assert admit(service, charge("team-a", "retry", 5, H100, uid="u-1"), "team-a", quotas).allowed
    assert [r.gpus for r in store.read("team-a").status.reservations] == [5]


def test_the_same_pod_admitted_again_keeps_its_fresh_reservation_and_writes_nothing(
    service: QuotaService, store: CountingStore, clock: Clock, example_quotas: list[dict[str, Any]]
) -> None:
    """An API server retrying a call does not rewrite the shared state (every other worker would parse it
    again): the reservation stands while half its grace period is left, then it is renewed."""
    quotas = team_a(example_quotas)
    first = admit(service, charge("team-a", "retry", 5, H100, uid="u-1"), "team-a", quotas)
    assert first.allowed and first.reservation_id
    written = store.read("team-a")
    clock.now += 29
    again = admit(service, charge("team-a", "retry", 5, H100, uid="u-1"), "team-a", quotas)
    assert again.allowed and again.reservation_id is None  # nothing new reserved: the first one holds
    assert store.read("team-a") == written
    # Still counted for everyone else.
    assert not admit(service, charge("team-a", "other", 4, H100), "team-a", quotas).allowed
    clock.now += 2  # less than half the grace period left: renewed
    renewed = admit(service, charge("team-a", "retry", 5, H100, uid="u-1"), "team-a", quotas)
    assert renewed.reservation_id
    [held] = store.read("team-a").status.reservations
    assert (held.id, held.expires_at) == (renewed.reservation_id, clock.now + 60)


def test_the_same_pod_asking_for_more_replaces_its_reservation(
    service: QuotaService, store: CountingStore, example_quotas: list[dict[str, Any]]
) -> None:
    quotas = team_a(example_quotas)
    assert admit(service, charge("team-a", "grow", 2, H100, uid="u-1"), "team-a", quotas).allowed
    assert admit(service, charge("team-a", "grow", 3, H100, uid="u-1"), "team-a", quotas).reservation_id
    assert [r.gpus for r in store.read("team-a").status.reservations] == [3]


def test_release_gives_back_a_reservation(service: QuotaService, store: CountingStore,
                                          example_quotas: list[dict[str, Any]]) -> None:
    quotas = team_a(example_quotas)
    decision = admit(service, charge("team-a", "a", 8, H100), "team-a", quotas)
    assert decision.reservation_id
    service.release_all(quotas, decision.reservation_id)
    assert store.read("team-a").status.reservations == ()
    assert admit(service, charge("team-a", "b", 8, H100), "team-a", quotas).allowed


def test_a_release_puts_back_the_live_reservation_it_replaced(
    service: QuotaService, store: CountingStore, clock: Clock, example_quotas: list[dict[str, Any]]
) -> None:
    quotas = team_a(example_quotas)
    earlier = admit(service, charge("team-a", "x", 2, H100, uid="u-x"), "team-a", quotas)
    [replaced] = store.read("team-a").status.reservations
    clock.now += 40  # less than half the grace period left: a new admission replaces it
    later = admit(service, charge("team-a", "x", 2, H100, uid="u-x"), "team-a", quotas)
    assert later.reservation_id and later.reservation_id != earlier.reservation_id
    service.release("team-a", later.reservation_id, restore=[replaced])
    assert store.read("team-a").status.reservations == (replaced,)
    # Not once it has expired.
    clock.now += 10
    third = admit(service, charge("team-a", "x", 2, H100, uid="u-x"), "team-a", quotas)
    clock.now += 15
    assert third.reservation_id
    service.release("team-a", third.reservation_id, restore=[replaced])
    assert store.read("team-a").status.reservations == ()


def test_limits_in_two_quota_objects_are_taken_together_or_not_at_all(
    service: QuotaService, store: CountingStore
) -> None:
    quotas = [
        {"metadata": {"name": "q-types"}, "spec": {"tenant": "t", "namespaces": ["t"],
                                                   "limits": [{"acceleratorType": H100, "gpus": 8}]}},
        {"metadata": {"name": "q-profiles"}, "spec": {"tenant": "t", "namespaces": ["t"],
                                                      "limits": [{"profile": "premium-h100", "gpus": 4}]}},
    ]
    assert admit(service, charge("t", "a", 4, H100, profile="premium-h100"), "t", quotas).allowed
    refused = admit(service, charge("t", "b", 2, H100, profile="premium-h100"), "t", quotas)
    assert refused.message.startswith("tenant t: profile premium-h100 4 of 4 GPUs in use, this pod asks for 2; ")
    # The H100 reservation taken before the profile limit refused was given back.
    assert [r.pod for r in store.read("q-types").status.reservations] == ["t/a"]


def test_a_passed_deadline_raises_quota_unavailable(service: QuotaService,
                                                    example_quotas: list[dict[str, Any]]) -> None:
    with pytest.raises(QuotaUnavailable):
        service.check(charge("team-a", "a", 1, H100), "team-a", team_a(example_quotas), [], dry_run=False,
                      deadline=time.monotonic() - 1)


def test_usage_lines_and_metrics(service: QuotaService, example_quotas: list[dict[str, Any]]) -> None:
    quotas = ml_research(example_quotas)
    pods = [
        charge("ml-research", "a", 4, H100, bound=H100, profile="premium-h100", tenant="ml-research", memory_gi=320),
        charge("team-a", "b", 4, H100, bound=H100, tenant="team-a"),
    ]
    lines = {line.key.metric_type: line for line in service.usage("ml-research", quotas, pods)}
    assert lines[H100].used_gpus == 4 and lines[H100].limit_gpus == 16
    assert lines["profile:premium-h100"].used_memory == 320 * 1024**3
    assert lines[GB200].used_gpus == 0
    sample = REGISTRY.get_sample_value
    assert sample("kgwe_quota_used", {"tenant": "ml-research", "type": H100}) == 4
    assert sample("kgwe_quota_limit", {"tenant": "ml-research", "type": "profile:premium-h100"}) == 12


def test_profile_refusal_carries_no_type_note(service: QuotaService) -> None:
    quotas = [{"metadata": {"name": "p"}, "spec": {"tenant": "t", "namespaces": ["t"],
                                                   "limits": [{"profile": "flex", "gpus": 2}]}}]
    refused = admit(service, charge("t", "a", 3, A100, H100, profile="flex"), "t", quotas)
    assert refused.message == "tenant t: profile flex 0 of 2 GPUs in use, this pod asks for 3"


def test_a_reservation_ends_when_the_pod_list_shows_its_pod(
    service: QuotaService, store: CountingStore, example_quotas: list[dict[str, Any]]
) -> None:
    """The status holds only pods the pod list does not show yet: it stays small under a steady stream of
    admissions instead of growing with every pod admitted in the grace period."""
    quotas = team_a(example_quotas)
    listed: list[PodCharge] = []
    for index in range(6):
        pod = charge("team-a", f"r-{index}", 1, H100, uid=f"uid-{index}", tenant="team-a")
        assert admit(service, pod, "team-a", quotas, listed).allowed
        listed.append(charge("team-a", f"r-{index}", 1, H100, uid=f"uid-{index}", tenant="team-a"))
    # Each admission dropped the reservations of the pods listed by then: only the last one is held.
    assert [r.pod for r in store.read("team-a").status.reservations] == ["team-a/r-5"]
    # A listed pod is counted once, by the list: 6 of 8 used, so a 2-GPU pod fits and a third does not.
    assert admit(service, charge("team-a", "two", 2, H100, uid="uid-two"), "team-a", quotas, listed).allowed
    refused = admit(service, charge("team-a", "one", 1, H100, uid="uid-one"), "team-a", quotas, listed)
    assert not refused.allowed
    assert "8 of 8 GPUs in use" in refused.message
