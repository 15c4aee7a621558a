"""Leader election on a Lease of the fake API server, on a clock the test moves."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from kube_fake_apiserver import FakeApiServer

from policies.kernel.records import Unavailable
from webhook.controllers.leader import LeaderElector, micro_time

LEASE = "/apis/coordination.k8s.io/v1/namespaces/kgwe-system/leases/kgwe-controllers"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock() -> Clock:
    return Clock()


def elector(api_client, clock: Clock, identity: str) -> LeaderElector:
    return LeaderElector(api_client, identity=identity, clock=clock, lease_seconds=15, renew_deadline_seconds=10)


def holder(apiserver: FakeApiServer) -> dict:
    return apiserver.leases["kgwe-system/kgwe-controllers"]["spec"]


def test_without_a_cluster_it_is_always_leader():
    alone = LeaderElector(None)
    alone.start()
    assert alone.is_leader()
    assert alone.try_acquire_or_renew()
    alone.stop()
    assert alone.is_leader()


def test_one_holder_at_a_time_and_takeover_after_expiry(apiserver, api_client, clock):
    a, b = elector(api_client, clock, "a"), elector(api_client, clock, "b")
    assert a.try_acquire_or_renew()
    assert a.is_leader()
    assert holder(apiserver)["holderIdentity"] == "a"
    assert not b.try_acquire_or_renew()
    assert not b.is_leader()

    # a keeps renewing: b never gets it.
    for _ in range(5):
        clock.advance(5)
        assert a.try_acquire_or_renew()
        assert not b.try_acquire_or_renew()
    assert holder(apiserver)["leaseTransitions"] == 0

    # a stops renewing: its own claim lapses at the renew deadline, before b may take over at expiry.
    clock.advance(10)
    assert not a.is_leader()
    assert not b.try_acquire_or_renew()  # b saw the last renewal 10 s ago on its own clock
    clock.advance(5)
    assert b.try_acquire_or_renew()
    assert b.is_leader()
    spec = holder(apiserver)
    assert spec["holderIdentity"] == "b"
    assert spec["leaseTransitions"] == 1
    assert not a.try_acquire_or_renew()


def test_release_hands_over_at_once(apiserver, api_client, clock):
    a, b = elector(api_client, clock, "a"), elector(api_client, clock, "b")
    assert a.try_acquire_or_renew()
    assert not b.try_acquire_or_renew()
    a.release()
    assert not a.is_leader()
    assert holder(apiserver)["holderIdentity"] == ""
    assert b.try_acquire_or_renew()


def test_a_leader_that_cannot_renew_steps_down(apiserver, api_client, clock):
    a = elector(api_client, clock, "a")
    assert a.try_acquire_or_renew()
    apiserver.fail_next(LEASE, 500, times=10)
    clock.advance(5)
    with pytest.raises(Unavailable) as failed:
        a.try_acquire_or_renew()
    assert failed.value.status == 500
    assert a.is_leader()  # still within the renew deadline
    clock.advance(6)
    assert not a.is_leader()


def test_lost_write_race_is_not_leadership(apiserver, api_client, clock):
    a, b = elector(api_client, clock, "a"), elector(api_client, clock, "b")
    assert a.try_acquire_or_renew()
    # b read the lease; a renews before b's write lands: b's write carries a stale resourceVersion.
    lease = apiserver.leases["kgwe-system/kgwe-controllers"]
    stale = {**lease, "metadata": dict(lease["metadata"])}
    assert a.try_acquire_or_renew()
    assert not b._write(stale["metadata"]["resourceVersion"], b._spec(None, prior=stale["spec"]), clock())
    assert holder(apiserver)["holderIdentity"] == "a"


def test_lease_times_are_micro_times(apiserver, api_client, clock):
    assert elector(api_client, clock, "a").try_acquire_or_renew()
    spec = holder(apiserver)
    assert spec["renewTime"].endswith("Z") and len(spec["renewTime"].split(".")[1]) == 7
    assert spec["leaseDurationSeconds"] == 15
    assert micro_time(datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)) == "2026-01-02T03:04:05.000000Z"
