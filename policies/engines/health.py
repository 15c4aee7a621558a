"""Whether the Rego engine can be reached, and getting it back when it cannot.

Only an out-of-process engine (an OPA server) can be unreachable. When it is, the policy runtime keeps
serving: CEL policies and the CEL parts of every GPUPolicy never touch the Rego engine, and the Rego
policies answer per `policies.failureMode` (see `PolicyRuntime`). This module holds the state the
runtime consults (`up`, the reason, since when), the `kgwe_policy_engine_up{engine}` gauge, one log line
per state change, and the background task (`reconnect-ENGINE`, on demand: it holds a thread only while
the engine is down) that retries with jittered exponential backoff (bounded by `max_delay`) until the
modules are loaded on the engine again.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from policies.engines.rego import RegoCompileError, RegoEngineUnavailable, RegoEngineUnreachable, RegoInput
from policies.kernel.background import Task
from policies.kernel.metrics import POLICY_ENGINE_UP
from policies.vocabulary.backoff import Backoff

log = logging.getLogger("kgwe.policies")


class UnreachablePrepared:
    """Stands in for a module set that could not be loaded because the engine was unreachable: every query
    fails as unreachable, so each request takes the engine-down path until the reconnect loop replaces it."""

    def __init__(self, engine_name: str, reason: str) -> None:
        self.engine_name = engine_name
        self.reason = reason

    def query(self, path: str, rego_input: RegoInput | None = None) -> Any:
        raise RegoEngineUnreachable(self.reason)

    def set_cluster(self, cluster: Mapping[str, Any]) -> None:
        return

    def close(self) -> None:
        return


class EngineHealth:
    """Up/down state of one Rego engine and its reconnect loop.

    `reconnect` loads the serving module set on the engine again; it returns when the set is served and
    raises RegoEngineUnavailable (still unreachable) or RegoCompileError (reachable but refusing) otherwise.
    """

    def __init__(
        self, engine: str, reconnect: Callable[[], None], *, first_delay: float = 0.5, max_delay: float = 30.0,
    ) -> None:
        self.engine = engine
        self._reconnect = reconnect
        self.first_delay = first_delay
        self.max_delay = max_delay
        self._lock = threading.Lock()
        self._down_since: float | None = None  # wall clock, for the /readyz line
        self._reason = ""
        self._refused: str | None = None  # the refusal last logged, so each distinct one is logged once
        # Each delay a random share between half and all of first_delay, 2 x first_delay, ... max_delay; the
        # first attempt, too, waits one delay: the engine has just failed.
        self.task = Task(
            f"reconnect-{engine}", self._attempt, interval=None, delay_first=True,
            backoff=Backoff(base=first_delay, cap=max_delay, factor=2.0, jitter=0.5), on_error=self._attempt_failed,
        )
        POLICY_ENGINE_UP.labels(engine).set(1)

    @property
    def up(self) -> bool:
        return self._down_since is None

    def mark_down(self, reason: str) -> None:
        """The engine could not be reached: log once, export 0, and make sure the reconnect loop runs."""
        with self._lock:
            first = self._down_since is None
            if first:
                self._down_since = time.time()
                log.error(
                    "policy engine %s failed: %s; it is marked unavailable, its Rego policies follow "
                    "policies.failureMode (CEL policies are unaffected), reconnecting in the background",
                    self.engine, reason,
                )
                POLICY_ENGINE_UP.labels(self.engine).set(0)
            self._reason = reason
        self.task.wake()  # starts the reconnect task unless it runs already

    def mark_up(self) -> None:
        with self._lock:
            if self._down_since is not None:
                log.warning("policy engine %s is reachable again after %.0fs; its Rego policies are served again",
                            self.engine, time.time() - self._down_since)
            self._down_since = None
            self._reason = ""
            POLICY_ENGINE_UP.labels(self.engine).set(1)

    def problems(self) -> list[str]:
        with self._lock:
            if self._down_since is None:
                return []
            since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self._down_since))
            return [f"policy engine {self.engine} unavailable since {since}: {self._reason}; its Rego policies "
                    "follow policies.failureMode, CEL policies are evaluated as usual"]

    def close(self) -> None:
        """Stop reconnecting (the thread, if any, ends at its next wake-up; nobody waits for it)."""
        self.task.signal_stop()

    def _attempt(self) -> None:
        """One reconnect attempt of the task; it raises while the engine is still unreachable or refusing."""
        if self.up:
            return  # marked up meanwhile (a reload reached it)
        self._reconnect()
        self.mark_up()
        self._refused = None

    def _attempt_failed(self, exc: Exception) -> None:
        if isinstance(exc, RegoEngineUnavailable):
            with self._lock:
                self._reason = str(exc)
        elif isinstance(exc, RegoCompileError):
            # Reachable but refusing the set that serves elsewhere (another OPA version?): say so once.
            if str(exc) != self._refused:
                log.error("policy engine %s is reachable but refused the policy set: %s", self.engine, exc)
            self._refused = str(exc)
            with self._lock:
                self._reason = f"reachable but refused the policy set: {exc}"
        else:  # the task outlives any surprise; it tries again after the next delay
            log.exception("reconnecting to policy engine %s failed", self.engine)
