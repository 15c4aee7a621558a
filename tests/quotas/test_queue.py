"""The quota queue (policies/quota/queue.py): who starts, on which type, who waits and why, in which order."""

from __future__ import annotations

from decimal import Decimal

from quota_fixtures import charge

from policies.quota.model import LimitKey, QuotaLimit
from policies.quota.queue import Ask, Ledger, Waiter, never_fits, plan_queue, wait_message

H100, A100, L4 = "nvidia-h100-80gb", "nvidia-a100-80gb", "nvidia-l4-24gb"
GI = Decimal(1024**3)


def limit(type_id: str, gpus: int | None, memory_gi: int | None = None, kind: str = "acceleratorType") -> QuotaLimit:
    return QuotaLimit("team-a", LimitKey(kind, type_id), Decimal(gpus) if gpus is not None else None,  # type: ignore[arg-type]
                      Decimal(memory_gi) * GI if memory_gi is not None else None)


def waiter(name: str, gpus: int, *types: str, created: str = "2026-11-29T00:00:00Z", profile: str | None = None,
           members: int = 1) -> Waiter:
    ask = Ask(f"team-a/{name}", None, tuple(types), profile, Decimal(gpus), Decimal(0))
    kind = "gang" if members > 1 else "pod"
    return Waiter(f"{kind} team-a/{name}", (ask,) * members, (created, name))


def test_pods_start_in_creation_order_until_the_limit_and_the_rest_wait_in_line() -> None:
    used = [charge("team-a", "running", 4, H100, bound=H100)]
    waiters = [waiter(f"p{i}", 2, H100, created=f"2026-11-29T00:00:0{i}Z") for i in range(4)]
    queue = plan_queue("team-a", [limit(H100, 8)], used, reversed(waiters))
    assert [r.waiter.label for r in queue.releases] == ["pod team-a/p0", "pod team-a/p1"]
    assert [(w.waiter.label, w.position) for w in queue.waits] == [("pod team-a/p2", 1), ("pod team-a/p3", 2)]
    assert wait_message("team-a", queue.waits[1]) == (
        "team-a: nvidia-h100-80gb 8 of 8 GPUs in use; this pod asks 2; 2nd in line")


def test_best_effort_fifo_lets_a_pod_that_fits_pass_and_strict_fifo_does_not() -> None:
    used = [charge("team-a", "running", 6, H100, bound=H100)]
    waiters = [waiter("big", 4, H100, created="1"), waiter("small", 2, H100, created="2")]
    best = plan_queue("team-a", [limit(H100, 8)], used, waiters)
    assert [r.waiter.label for r in best.releases] == ["pod team-a/small"]
    strict = plan_queue("team-a", [limit(H100, 8)], used, waiters, order="StrictFIFO")
    assert strict.releases == []
    assert "StrictFIFO" in strict.waits[1].reason


def test_a_pod_of_several_types_is_pinned_to_the_first_with_quota_left_and_charged_it() -> None:
    limits = [limit(H100, 8), limit(A100, 2)]
    used = [charge("team-a", "r", 8, H100, bound=H100)]
    queue = plan_queue("team-a", limits, used, [waiter("a", 2, H100, A100, created="1"),
                                                  waiter("b", 1, H100, A100, created="2")])
    first, = queue.releases
    assert (first.type_id, first.pin) == (A100, True)
    # b no longer fits A100 either (2 of 2 in use after a): it waits, naming the type it prefers.
    assert queue.waits[0].reason.startswith("nvidia-h100-80gb 8 of 8 GPUs in use")


def test_a_type_without_a_limit_takes_the_pod_when_the_limited_one_is_full() -> None:
    used = [charge("team-a", "r", 8, H100, bound=H100)]
    queue = plan_queue("team-a", [limit(H100, 8)], used, [waiter("a", 4, H100, L4)])
    assert (queue.releases[0].type_id, queue.releases[0].pin) == (L4, True)


def test_capacity_is_preferred_among_types_with_quota_left() -> None:
    queue = plan_queue("team-a", [limit(H100, 8)], [], [waiter("a", 1, H100, L4)],
                       has_capacity=lambda _w, t: t == L4)
    assert queue.releases[0].type_id == L4
    # No type has room now: the first with quota left, so the pod is never held here on a guess.
    queue = plan_queue("team-a", [limit(H100, 8)], [], [waiter("a", 1, H100, L4)], has_capacity=lambda _w, _t: False)
    assert queue.releases[0].type_id == H100


def test_a_released_pod_not_yet_bound_counts_against_every_type_it_may_land_on() -> None:
    ledger = Ledger([limit(H100, 8), limit(A100, 2)])
    ledger.charge(charge("team-a", "r", 2, H100, A100))
    assert ledger.gpus[LimitKey("acceleratorType", H100)] == 2
    assert ledger.gpus[LimitKey("acceleratorType", A100)] == 2
    ledger.charge(charge("team-a", "b", 1, H100, A100, bound=A100))
    assert ledger.gpus[LimitKey("acceleratorType", H100)] == 2


def test_a_gang_is_released_whole_or_not_at_all() -> None:
    used = [charge("team-a", "r", 4, H100, bound=H100)]
    queue = plan_queue("team-a", [limit(H100, 8)], used, [waiter("llm", 2, H100, members=3)])
    assert queue.releases == []
    assert queue.waits[0].reason == "nvidia-h100-80gb 4 of 8 GPUs in use; this gang asks 6"
    queue = plan_queue("team-a", [limit(H100, 8)], used, [waiter("llm", 2, H100, members=2)])
    assert len(queue.releases[0].waiter.asks) == 2


def test_profile_and_memory_limits_hold_too() -> None:
    limits = [limit("premium", 12, 960, kind="profile")]
    ask = Ask("team-a/p", None, (H100,), "premium", Decimal(8), Decimal(640) * GI)
    used = [charge("team-a", "r", 4, H100, bound=H100, profile="premium", memory_gi=400)]
    queue = plan_queue("team-a", limits, used, [Waiter("pod team-a/p", (ask,), ("1", "p"))])
    assert queue.waits[0].reason == "profile premium 400Gi of 960Gi GPU memory in use; this pod asks 640Gi"


def test_an_ask_no_limit_could_ever_hold_is_named() -> None:
    assert never_fits([limit(H100, 8)], [Ask("team-a/p", None, (H100,), None, Decimal(9), Decimal(0))]) == (
        "nvidia-h100-80gb limit 8 GPUs, this pod asks 9; this pod could never run within it")
    gang = [Ask("team-a/p", None, (H100,), None, Decimal(4), Decimal(0))] * 3
    assert "the gang asks 12" in str(never_fits([limit(H100, 8)], gang))
    # Another type it may run on has room: it could run there.
    assert never_fits([limit(H100, 8)], [Ask("team-a/p", None, (H100, L4), None, Decimal(9), Decimal(0))]) is None
