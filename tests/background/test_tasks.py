"""The background task abstraction (policies/kernel/background.py) on real threads: leader gating, error backoff,
bounded stops, isolation of a failing task, watches, on-demand tasks and the supervisor's order."""

from __future__ import annotations

import queue
import random
import threading
import time

import pytest
from patience import WAIT_SECONDS
from waiting import eventually

from policies.kernel.background import Task
from policies.kernel.supervisor import Supervisor
from policies.vocabulary.backoff import Backoff


class Count:
    """A body that counts its runs and can be told to fail."""

    def __init__(self, failures: int = 0) -> None:
        self.runs = 0
        self.failures_left = failures
        self.lock = threading.Lock()

    def __call__(self) -> None:
        with self.lock:
            self.runs += 1
            if self.failures_left > 0:
                self.failures_left -= 1
                raise RuntimeError(f"failure {self.runs}")


@pytest.fixture
def supervisor() -> Supervisor:
    leading = threading.Event()
    made = Supervisor(is_leader=leading.is_set)
    made.leading = leading  # type: ignore[attr-defined]
    yield made
    made.stop(timeout=2.0)


def test_a_leader_only_task_runs_only_while_leading(supervisor: Supervisor) -> None:
    body, standby = Count(), Count()
    task = supervisor.add(Task("leader-work", body, interval=0.01, leader_only=True, standby=standby))
    supervisor.start()
    eventually(lambda: standby.runs >= 5)
    assert body.runs == 0  # a follower never runs the body, only its standby
    supervisor.leading.set()  # type: ignore[attr-defined]
    eventually(lambda: body.runs >= 3)
    assert task.state().runs >= 3
    supervisor.leading.clear()  # type: ignore[attr-defined]
    eventually(lambda: task.state().runs == body.runs and standby.runs >= 10)
    ran = body.runs
    seen = standby.runs
    eventually(lambda: standby.runs >= seen + 5)
    assert body.runs == ran  # leadership lost: the body stopped again


def test_a_task_alone_or_with_its_own_leadership_keeps_it(supervisor: Supervisor) -> None:
    mine = threading.Event()
    body = Count()
    supervisor.add(Task("own-leader", body, interval=0.01, leader_only=True, is_leader=mine.is_set))
    supervisor.leading.set()  # type: ignore[attr-defined]
    supervisor.start()
    time.sleep(0.05)
    assert body.runs == 0  # its own is_leader says no, whatever the supervisor's says
    mine.set()
    eventually(lambda: body.runs >= 1)


def test_errors_back_off_and_a_success_resets_the_backoff() -> None:
    body = Count(failures=3)
    backoff = Backoff(base=0.01, cap=0.05, rng=random.Random(7))
    errors: list[str] = []
    # A day between runs: only the backoff's short delays can bring the retries within the test.
    task = Task("flaky", body, interval=86400, run_at_start=True, backoff=backoff,
                on_error=lambda exc: errors.append(str(exc)))
    task.start()
    try:
        eventually(lambda: task.state().runs == 1)
        state = task.state()
        assert body.runs == 4
        assert errors == ["failure 1", "failure 2", "failure 3"]
        assert state.failures == 3 and state.consecutive_failures == 0
        assert state.last_error is None and state.last_success is not None
        assert backoff.attempts == 0
    finally:
        assert task.stop(timeout=WAIT_SECONDS)


def test_a_failure_is_kept_until_the_next_success() -> None:
    seen = threading.Event()
    task = Task("broken", lambda: 1 / 0, interval=0.01, on_error=lambda _exc: seen.set())
    task.start()
    try:
        eventually(seen.is_set)
        state = task.state()
        assert state.failures >= 1 and state.consecutive_failures >= 1
        assert state.last_error == "ZeroDivisionError: division by zero"
        assert state.last_error_at is not None and state.last_success is None
        assert state.running
    finally:
        task.stop(timeout=2.0)


def test_one_failing_task_does_not_stop_the_others(supervisor: Supervisor) -> None:
    failing, healthy = Count(failures=10**9), Count()
    supervisor.add(Task("failing", failing, interval=0.005, on_error=lambda _exc: None))
    supervisor.add(Task("healthy", healthy, interval=0.005))
    supervisor.start()
    eventually(lambda: failing.runs >= 20 and healthy.runs >= 20)
    states = {s.name: s for s in supervisor.states()}
    assert states["failing"].running and states["failing"].failures >= 20
    assert states["healthy"].running and states["healthy"].failures == 0
    assert supervisor.problems() == []


def test_stop_is_bounded_even_when_a_body_never_returns() -> None:
    release = threading.Event()
    entered = threading.Event()

    def stuck() -> None:
        entered.set()
        release.wait(30)  # ignores the stop, as a call hung on a dead API server would

    polite = Count()
    supervisor = Supervisor([
        Task("stuck", stuck, interval=0.01, run_at_start=True),
        Task("polite", polite, interval=0.01),
    ])
    supervisor.start()
    try:
        eventually(lambda: entered.is_set() and polite.runs >= 1)
        # The bound is the whole wait (the stuck task never ends), so it stays short; yet the polite task must
        # wake and end within it, which 0.2 s left to a busy machine's scheduler: 1 s, five times that.
        late = supervisor.stop(timeout=1.0)
        assert late == ["stuck"]
        states = {s.name: s for s in supervisor.states()}
        assert not states["polite"].running
        assert states["stuck"].running
    finally:
        release.set()
    eventually(lambda: not supervisor.states()[0].running)


def test_a_watch_is_interrupted_on_stop_and_rerun_after_a_failure() -> None:
    inbox: queue.Queue[object] = queue.Queue()
    handled: list[object] = []
    starts = Count()

    def watch() -> None:
        starts()
        while True:
            item = inbox.get()
            if item is None:
                return
            if item == "boom":
                raise RuntimeError("stream broke")
            handled.append(item)

    task = Task("watch", watch, interval=0, backoff=Backoff(base=0.01, cap=0.02),
                interrupt=lambda: inbox.put(None), on_error=lambda _exc: None)
    task.start()
    inbox.put("a")
    inbox.put("boom")
    inbox.put("b")
    eventually(lambda: handled == ["a", "b"])
    assert starts.runs == 2 and task.state().failures == 1
    assert task.stop(timeout=WAIT_SECONDS)
    assert not task.state().running


def test_an_on_demand_task_holds_a_thread_only_while_woken() -> None:
    body = Count()
    task = Task("on-demand", body, interval=None)
    assert not task.state().running
    task.wake()
    eventually(lambda: body.runs == 1 and not task.state().running)
    task.wake()
    eventually(lambda: body.runs == 2 and not task.state().running)


def test_an_on_demand_task_with_a_backoff_retries_until_it_succeeds() -> None:
    body = Count(failures=2)
    task = Task("reconnect", body, interval=None, backoff=Backoff(base=0.01, cap=0.02), delay_first=True,
                on_error=lambda _exc: None)
    task.wake()
    eventually(lambda: task.state().runs == 1 and not task.state().running)
    assert body.runs == 3 and task.state().failures == 2
    task.stop(timeout=1.0)
    task.wake()  # stopped: a wake starts nothing
    time.sleep(0.05)
    assert body.runs == 3


def test_the_supervisor_stops_in_reverse_order_and_runs_stop_hooks() -> None:
    order: list[str] = []
    supervisor = Supervisor([
        Task("election", Count(), interval=0.01, on_stop=lambda: order.append("election")),
        Task("controller", Count(), interval=0.01, leader_only=True, on_stop=lambda: order.append("controller")),
    ])
    supervisor.start()
    assert supervisor.stop(timeout=WAIT_SECONDS) == []
    assert order == ["controller", "election"]
    with pytest.raises(ValueError, match="supervised already"):
        supervisor.add(Task("election", Count(), interval=1.0))


def test_a_task_that_dies_is_reported() -> None:
    def exits() -> None:
        raise SystemExit(3)

    supervisor = Supervisor([Task("dies", exits, interval=0.01, run_at_start=True)])
    supervisor.start()
    try:
        eventually(lambda: not supervisor.states()[0].running and supervisor.states()[0].crashed is not None)
        assert supervisor.problems() == ["background task dies stopped: SystemExit: 3"]
    finally:
        supervisor.stop(timeout=1.0)


def test_bad_shapes_are_refused() -> None:
    with pytest.raises(ValueError, match="needs a backoff"):
        Task("spin", Count(), interval=0)
    with pytest.raises(ValueError, match="delay_first"):
        Task("early", Count(), interval=1.0, backoff=Backoff(), delay_first=True)
    with pytest.raises(ValueError, match="negative"):
        Task("back", Count(), interval=-1)


def _burn(cpu_seconds: float) -> None:
    start = time.thread_time()
    while time.thread_time() - start < cpu_seconds:
        pass


def test_a_periodic_task_takes_at_most_its_duty_of_a_cpu_however_often_it_is_woken() -> None:
    """Runs of 20 ms of CPU on a 1 ms interval, woken all the time: the rest after each run (three times its
    CPU at the default quarter) holds the task's CPU to a quarter of the wall time it ran for. A bound, not a
    speed: each rest sleeps at least what it is asked, so the share cannot pass it on any machine."""
    runs: list[float] = []

    def body() -> None:
        started = time.thread_time()
        _burn(0.02)
        runs.append(time.thread_time() - started)

    task = Task("busy", body, interval=0.001, run_at_start=True)
    began = time.monotonic()
    task.start()
    try:
        eventually(lambda: len(runs) >= 8)
        for _ in range(50):
            task.wake()
            time.sleep(0.001)
    finally:
        # Ended before the share is taken: a run the thread appended after it would count without its rest.
        assert task.stop(timeout=WAIT_SECONDS)
    elapsed = time.monotonic() - began
    # The rest owed after the last run ((1 - duty) / duty of it) had not begun when the task stopped: with it,
    # the share is at most the duty exactly (nine runs and eight rests alone are 9/33 of their time).
    assert sum(runs) <= task.duty * elapsed + (1 - task.duty) * runs[-1]  # type: ignore[operator]
    assert task.rest_after(0.02) == pytest.approx(0.06)


def test_the_duty_bound_can_be_lifted_and_spares_watches_and_on_demand_tasks() -> None:
    assert Task("free", lambda: None, interval=1.0, duty=None).rest_after(5.0) == 0.0
    assert Task("watch", lambda: None, interval=0, backoff=Backoff(base=0.1, cap=1.0)).rest_after(5.0) == 0.0
    assert Task("woken", lambda: None, interval=None).rest_after(5.0) == 0.0
    with pytest.raises(ValueError, match="duty"):
        Task("bad", lambda: None, interval=1.0, duty=0.0)
