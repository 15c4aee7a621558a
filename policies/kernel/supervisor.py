"""The background tasks of one process under one supervisor: started in order, stopped in reverse order within
one bound (a task's thread that does not end in time is left to die with the process: every thread is a daemon),
and reported for `/readyz` (background.py has the tasks themselves)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable

from policies.kernel.background import Task, TaskState

log = logging.getLogger("kgwe.background")


class Supervisor:
    """The background tasks of one process: started in order, stopped in reverse order, reported.

    Leader-only tasks added here consult `is_leader` (the process's LeaderElector, itself a task here).
    """

    def __init__(self, tasks: Iterable[Task] = (), *, is_leader: Callable[[], bool] = lambda: True) -> None:
        self.is_leader = is_leader
        self._tasks: list[Task] = []
        self._started = False
        self._lock = threading.Lock()
        for task in tasks:
            self.add(task)

    @property
    def tasks(self) -> list[Task]:
        return list(self._tasks)

    def add(self, task: Task) -> Task:
        """Take `task` over (started at once if the supervisor runs). Names are unique within a supervisor."""
        with self._lock:
            if any(t.name == task.name for t in self._tasks):
                raise ValueError(f"a background task named {task.name} is supervised already")
            if task.leader_only and not task.own_leadership:
                task.is_leader = self.is_leader
            self._tasks.append(task)
            started = self._started
        if started:
            task.start()
        return task

    def start(self) -> None:
        with self._lock:
            self._started = True
            tasks = list(self._tasks)
        for task in tasks:
            task.start()

    def stop(self, timeout: float = 5.0) -> list[str]:
        """Stop every task within `timeout` seconds in all; the names of those whose thread had not ended.

        Every task is signalled first, so they wind down together; then they are joined (and their
        `on_stop` hooks run) in reverse order of addition: the leader election, added first, releases its
        lease only after the leader-only tasks have ended.
        """
        with self._lock:
            self._started = False
            tasks = list(self._tasks)
        deadline = time.monotonic() + timeout
        for task in tasks:
            task.signal_stop()
        late: list[str] = []
        for task in reversed(tasks):
            if not task.join(deadline - time.monotonic()):
                late.append(task.name)
            task._finish()
        if late:
            log.warning("background tasks still running after %.1fs, left to end with the process: %s",
                        timeout, ", ".join(late))
        return late

    def states(self) -> list[TaskState]:
        return [task.state() for task in self._tasks]

    def problems(self) -> list[str]:
        """One line per task whose thread ended on something other than an Exception (it does not come back)."""
        return [f"background task {s.name} stopped: {s.crashed}" for s in self.states() if s.crashed]
