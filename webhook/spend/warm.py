"""The windows the Costs page offers, their documents kept warm as JSON off the event loop (issue 36).

At 150,000 pods a window's document lists every pod that ran in it (about 50 MB of JSON): computing it,
and turning it into JSON, takes seconds of CPU however each pod's rate is remembered (memo.py). So the
`costs-warm` task computes the page's windows (24h, 7d, 30d) on its own thread and keeps each as JSON
bytes; `/api/v1/costs?window=` answers a reader of every namespace from them. A request that finds its
answer older than `costs.cacheSeconds` (the age any answer could have before) gets it and wakes the task to
compute the next one: no CPU goes to windows nobody reads (the task shares the GIL with admission). The
30-day window is computed once the cluster is loaded, so the page's first view finds it ready; a window
nobody asked for `idle_seconds` is let go (the next request computes it again, and waits for it).

A window the page does not offer, and any answer while `costs.cacheSeconds` is 0, is computed on request
(the service's own cache), as before. A reader who sees only some namespaces gets a document computed
for them (service.py): not kept here.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import orjson

from policies.kernel.background import Task
from webhook.config import Config
from webhook.spend.service import SpendService

log = logging.getLogger("kgwe.spend")

# The Costs page's windows (webhook/ui/app.js WINDOWS); the first view asks the last.
OFFERED = ("24h", "7d", "30d")
FIRST = "30d"


@dataclass(frozen=True)
class WindowAnswer:
    body: bytes  # the window's document (report.py WindowCosts) as JSON
    namespaces: frozenset[str]  # the namespaces it names (whose readers may see it)
    built: float  # when it was computed (WarmWindows' clock: monotonic)


def answer_of(service: SpendService, window: str, remember: bool = True,
              clock: Callable[[], float] = time.monotonic) -> WindowAnswer:
    """The window's document computed now (the service's cache when `remember`) as an answer."""
    doc = service.window_costs(window, remember=remember)
    return WindowAnswer(orjson.dumps(doc.model_dump(mode="json")),
                        frozenset(row.namespace or "" for row in doc.namespaces), clock())


class WarmWindows:
    """The offered windows' answers, computed by the `costs-warm` task while `start()`ed and asked."""

    def __init__(self, service: SpendService, config: Callable[[], Config], loaded: Callable[[], bool] | None = None,
                 windows: tuple[str, ...] = OFFERED, idle_seconds: float = 600.0, interval: float = 1.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.service = service
        self._clock = clock
        self._config = config
        self._loaded = loaded or (lambda: True)
        self.windows = windows
        self.idle_seconds = idle_seconds
        self._answers: dict[str, WindowAnswer] = {}
        self._asked: dict[str, float] = {}  # when each window was last asked by a request
        self._failed: dict[str, float] = {}  # when the task's last computation of a window failed
        self._started = self._clock()
        # One computation of a window at a time: a request that finds none kept waits for the task's.
        self._building = {window: threading.Lock() for window in windows}
        self.builds = 0
        self._task = Task("costs-warm", self._pass, interval=interval, run_at_start=True,
                          on_error=lambda _exc: log.exception("computing a costs window failed"))

    def start(self) -> None:
        self._started = self._clock()
        self._task.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._task.stop(timeout)

    def answer(self, window: str) -> WindowAnswer:
        """The window's answer: kept (woken for a newer one when stale), else computed now (blocking: call it
        off the event loop). Raises WindowError, PrometheusUnavailable."""
        cache_seconds = self._config().costs.cache_seconds
        if window not in self._building or cache_seconds <= 0:
            return answer_of(self.service, window)
        self._asked[window] = self._clock()
        kept = self._answers.get(window)
        if kept is None:
            with self._building[window]:  # the task may be computing it: wait for that one
                kept = self._answers.get(window)
                if kept is None:
                    kept = self._build(window)
        elif self._clock() - kept.built >= cache_seconds:
            self._task.wake()
        return kept

    def _build(self, window: str) -> WindowAnswer:
        """The caller holds the window's lock."""
        kept = self._answers[window] = answer_of(self.service, window, False, self._clock)
        self.builds += 1
        return kept

    def _pass(self) -> None:
        """Compute the 30-day window at start, and a kept window that is stale and was asked since it was
        computed (one a run, so the task's rest after each follows that window's cost); let go of those
        nobody asked for `idle_seconds`. Nothing is computed while nobody reads the costs."""
        if not self._loaded():
            return
        cache_seconds = self._config().costs.cache_seconds
        now = self._clock()
        due: list[tuple[float, str]] = []
        for window in self.windows:
            asked = self._asked.get(window)
            last = asked if asked is not None else (self._started if window == FIRST else None)
            if last is None or now - last > self.idle_seconds:
                self._answers.pop(window, None)
                continue
            failed = self._failed.get(window)
            if failed is not None and (asked is None or asked < failed):
                continue  # failed (Prometheus away): tried again once a request asks after the failure
            kept = self._answers.get(window)
            if kept is None:
                due.append((0.0, window))
            elif asked is not None and asked >= kept.built and now - kept.built >= cache_seconds:
                due.append((kept.built, window))
        if due:
            window = min(due)[1]
            with self._building[window]:
                kept = self._answers.get(window)
                if kept is None or kept.built < now:  # not computed by a request meanwhile
                    try:
                        self._build(window)
                    except Exception:
                        self._failed[window] = now
                        raise
                    self._failed.pop(window, None)
