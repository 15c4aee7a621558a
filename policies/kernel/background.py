"""Background work of a KGWE process: named tasks, each on its own thread, and one supervisor over them.

Every loop that runs beside the requests (controllers, status writers, the policy sync, watches, the
model rebuild, an engine's reconnect) is a `Task`: a name, a body, when to run it, and what to do when
it fails. One concurrency model, threads: the kubernetes client's watches block, the command-line tools
have no event loop, and a body that does API I/O must never hold up admission on the event loop.

A task has one of three shapes:

- periodic (`interval` > 0): the body runs every `interval` seconds (first after one interval, or at once
  with `run_at_start`); a failure waits `backoff`'s next delay instead, when a backoff is given;
- watch (`interval` = 0): the body blocks for as long as it has work (a watch stream, a queue) and is run
  again when it returns; a failure waits `backoff`'s next delay. `interrupt` unblocks it on stop;
- on demand (`interval` None): `wake()` starts a thread that runs the body until no wake is pending and
  then ends, so an idle task holds no thread; a failure is retried after `backoff`'s next delay when a
  backoff is given, else it waits for the next wake.

A periodic task is held to a duty cycle: after a run that took C seconds of its thread's CPU, the next
run waits at least C x (1 / `duty` - 1) too, however soon its interval ends or a wake comes (a wake in
that rest runs the body when the rest is over). So no periodic task takes more than `duty` of a CPU
(default a quarter) whatever the cluster's size: its threads share the GIL with the event loop that
answers admission, and a pass that grows with the cluster slows down instead of starving admission
(issue 36). CPU, not wall time: a run that waited on the GIL or on the API did not use what it waited for.

A `leader_only` task runs its body only while `is_leader()` says this replica leads; on its ticks as a
follower it runs `standby` instead (a follower drops what only the leader exports). Each task keeps its
state (runs, failures, last success, last error) for `/readyz` and exports it as metrics.

The `Supervisor` (supervisor.py) holds the tasks of one process. This module lives in the kernel so that
the policy engines' reconnect loop and the webhook share it; it imports nothing of KGWE but the
vocabulary's `Backoff`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from policies.kernel.metric_kinds import counter, gauge
from policies.vocabulary.backoff import Backoff

log = logging.getLogger("kgwe.background")

# The share of a CPU a periodic task may take (its runs' thread CPU against the time from one run's start to
# the next's): 0.25 rests three times each run's CPU time.
DUTY = 0.25

Body = Callable[[], object]

LAST_SUCCESS = gauge(
    "kgwe_background_task_last_success_timestamp_seconds",
    "When each background task last finished a run without an error (Unix time)",
    ["task"],
)
FAILURES = counter("kgwe_background_task_failures_total", "Failed runs of each background task", ["task"])


@dataclass(frozen=True)
class TaskState:
    """What a task did so far, as `/readyz` and the metrics see it. Times are Unix times."""

    name: str
    leader_only: bool
    running: bool  # its thread is alive
    runs: int  # bodies that returned
    failures: int  # bodies that raised
    consecutive_failures: int
    last_success: float | None
    last_error: str | None  # the last failure's message, cleared by the next success
    last_error_at: float | None
    crashed: str | None  # the thread ended on an exception that is not an Exception (it is not restarted)


def _log_failure(name: str) -> Callable[[Exception], None]:
    def report(_exc: Exception) -> None:
        log.exception("background task %s failed", name)

    return report


class Task:
    """One named piece of background work on its own daemon thread (see the module doc for the shapes).

    `body` is called with no arguments. `on_error(exc)` is called inside the `except` block of a failed
    run (so `log.exception` there logs the traceback); the default logs one line with the traceback.
    `on_stop` runs once after the thread has ended (or the stop bound ran out), on the stopping thread.
    `delay_first` (on demand, with a backoff) waits one backoff delay before the first run of a wake.
    `duty` (periodic tasks): the share of a CPU its runs may take (see the module doc); None lifts the bound.
    """

    def __init__(
        self,
        name: str,
        body: Body,
        *,
        interval: float | None,
        leader_only: bool = False,
        run_at_start: bool = False,
        backoff: Backoff | None = None,
        delay_first: bool = False,
        standby: Body | None = None,
        on_error: Callable[[Exception], None] | None = None,
        interrupt: Callable[[], None] | None = None,
        on_stop: Callable[[], None] | None = None,
        is_leader: Callable[[], bool] | None = None,
        thread_name: str | None = None,
        duty: float | None = DUTY,
    ) -> None:
        if interval is not None and interval < 0:
            raise ValueError(f"task {name}: interval must not be negative")
        if delay_first and (interval is not None or backoff is None):
            raise ValueError(f"task {name}: delay_first needs an on-demand task with a backoff")
        if interval == 0 and backoff is None:
            raise ValueError(f"task {name}: a watch (interval 0) needs a backoff, or a failing body would spin")
        if duty is not None and not 0 < duty <= 1:
            raise ValueError(f"task {name}: duty must be in (0, 1]")
        self.name = name
        self.body = body
        self.interval = interval
        self.leader_only = leader_only
        self.run_at_start = run_at_start
        self.backoff = backoff
        self.delay_first = delay_first
        self.standby = standby
        self.on_error = on_error or _log_failure(name)
        self.interrupt = interrupt
        self.on_stop = on_stop
        # A leader-only task without its own is_leader takes its supervisor's; a task alone leads.
        self.is_leader: Callable[[], bool] = is_leader or (lambda: True)
        self.own_leadership = is_leader is not None
        self.thread_name = thread_name or f"kgwe-{name}"
        self.duty = duty
        self.last_cpu = 0.0  # thread CPU seconds of the last run (body or standby)
        self._stopping = threading.Event()
        self._woken = threading.Event()
        self._guard = threading.Lock()  # thread start and end against wake()
        self._thread: threading.Thread | None = None
        self._runs = 0
        self._failures = 0
        self._consecutive = 0
        self._last_success: float | None = None
        self._last_error: str | None = None
        self._last_error_at: float | None = None
        self._crashed: str | None = None

    # -- lifecycle --------------------------------------------------------------------------------
    @property
    def on_demand(self) -> bool:
        return self.interval is None

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    def start(self) -> None:
        """Start the thread; a running task is left be. An on-demand task only arms itself (`wake()` starts
        it), unless `run_at_start`: then it runs once now."""
        with self._guard:
            self._stopping.clear()
            if self._thread is not None and self._thread.is_alive():
                return
            if not self.on_demand:
                self._thread = self._spawn(self._periodic)
            elif self.run_at_start:
                self._woken.set()
                self._thread = self._spawn(self._on_demand)

    def wake(self) -> None:
        """Run now: an on-demand task starts its thread if none runs; a periodic task ends its current wait."""
        with self._guard:
            self._woken.set()
            if not self.on_demand or self._stopping.is_set():
                return
            if self._thread is None:
                self._thread = self._spawn(self._on_demand)

    def signal_stop(self) -> None:
        """Ask the thread to end (and unblock a watch body); returns at once."""
        self._stopping.set()
        self._woken.set()
        if self.interrupt is not None:
            try:
                self.interrupt()
            except Exception:  # stopping must go on whatever the interrupt hook does
                log.exception("background task %s: interrupting it failed", self.name)

    def join(self, timeout: float) -> bool:
        """Wait up to `timeout` seconds for the thread; True when it has ended (or never ran)."""
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(max(0.0, timeout))
        return thread is None or not thread.is_alive()

    def stop(self, timeout: float = 5.0) -> bool:
        """Signal, join within `timeout`, then run `on_stop`; True when the thread ended in time."""
        self.signal_stop()
        ended = self.join(timeout)
        if not ended:
            log.warning("background task %s did not end within %.1fs; left to end with the process",
                        self.name, timeout)
        self._finish()
        return ended

    def _finish(self) -> None:
        if self.on_stop is not None:
            try:
                self.on_stop()
            except Exception:
                log.exception("background task %s: its stop hook failed", self.name)

    def state(self) -> TaskState:
        thread = self._thread
        return TaskState(
            name=self.name, leader_only=self.leader_only, running=thread is not None and thread.is_alive(),
            runs=self._runs, failures=self._failures, consecutive_failures=self._consecutive,
            last_success=self._last_success, last_error=self._last_error, last_error_at=self._last_error_at,
            crashed=self._crashed,
        )

    # -- threads ----------------------------------------------------------------------------------
    def _spawn(self, target: Callable[[], None]) -> threading.Thread:
        thread = threading.Thread(target=self._guarded, args=(target,), name=self.thread_name, daemon=True)
        thread.start()
        return thread

    def _guarded(self, target: Callable[[], None]) -> None:
        try:
            target()
        except BaseException as exc:
            # Not an Exception (SystemExit, a native engine's panic): the thread ends here, logged once and
            # kept in the state (Supervisor.problems, /readyz) rather than re-raised into threading's hook.
            self._crashed = f"{type(exc).__name__}: {exc}"
            log.critical("background task %s ended: %s", self.name, self._crashed)
            with self._guard:
                self._thread = None if self.on_demand else self._thread

    def _periodic(self) -> None:
        assert self.interval is not None
        delay = 0.0 if self.run_at_start else self.interval
        while True:
            if self._wait(delay):
                return
            started = time.thread_time()
            ok = self._run_once()
            self.last_cpu = time.thread_time() - started
            delay = self.interval if ok else self._failure_delay()
            if self._rest(self.rest_after(self.last_cpu)):
                return
            delay = max(0.0, delay - self.rest_after(self.last_cpu))

    def rest_after(self, cpu_seconds: float) -> float:
        """The least wait after a run that took `cpu_seconds` of CPU, so runs take at most `duty` of a CPU."""
        if self.duty is None or self.interval is None or self.interval == 0:
            return 0.0
        return cpu_seconds * (1.0 / self.duty - 1.0)

    def _rest(self, seconds: float) -> bool:
        """Sleep `seconds` that no wake shortens (a wake meanwhile stays pending); True when stopped."""
        if seconds > 0:
            self._stopping.wait(seconds)
        return self._stopping.is_set()

    def _on_demand(self) -> None:
        if self.delay_first and self.backoff is not None and self._wait(self.backoff.next_delay()):
            self._end_on_demand()
            return
        while True:
            with self._guard:
                if self._stopping.is_set() or not self._woken.is_set():
                    self._thread = None  # under the guard: a wake from now on starts a new thread
                    return
                self._woken.clear()
            if not self._run_once() and self.backoff is not None:
                self._woken.set()  # retried after the delay, not only at the next wake
                if self._wait(self.backoff.next_delay()):
                    self._end_on_demand()
                    return

    def _end_on_demand(self) -> None:
        with self._guard:
            self._thread = None

    def _wait(self, delay: float) -> bool:
        """Sleep `delay` seconds or until stopped (True) or, for a periodic task, woken."""
        if self._stopping.is_set():
            return True
        if delay > 0 and not self.on_demand:
            if self._woken.wait(delay):
                self._woken.clear()
        elif delay > 0:
            self._stopping.wait(delay)
        return self._stopping.is_set()

    def _failure_delay(self) -> float:
        assert self.interval is not None
        return self.backoff.next_delay() if self.backoff is not None else self.interval

    def _run_once(self) -> bool:
        """One run (or one standby tick as a follower); False when the body raised."""
        if self.leader_only and not self.is_leader():
            if self.standby is not None:
                try:
                    self.standby()
                except Exception as exc:
                    self._failed(exc)
                    return False
            return True
        try:
            self.body()
        except Exception as exc:
            self._failed(exc)
            return False
        self._runs += 1
        self._consecutive = 0
        self._last_success = time.time()
        self._last_error = None
        LAST_SUCCESS.labels(self.name).set(self._last_success)
        if self.backoff is not None:
            self.backoff.reset()
        return True

    def _failed(self, exc: Exception) -> None:
        # Called inside the caller's `except` block, so on_error may log the traceback.
        self._failures += 1
        self._consecutive += 1
        self._last_error = f"{type(exc).__name__}: {exc}"
        self._last_error_at = time.time()
        FAILURES.labels(self.name).inc()
        try:
            self.on_error(exc)
        except Exception:  # a broken error hook must not end the task
            log.exception("background task %s: its error hook failed", self.name)
