"""The background refresh of the usage table (table.py): the only I/O behind what admission reads of usage.

Every `rightsizing.refreshInterval` (5m) one read of every namespace's history (the bounded, chunked
queries of history.py; the same number whatever the pods) is worked out into the report and a new table
swapped in. Every replica runs it: it only reads Prometheus and writes nothing, so there is nothing for a
leader to arbitrate, and each replica answers from its own memory.

Failure keeps the last table (recommendations change over hours, not minutes) until it is
`rightsizing.staleAfter` old; past that, and before the first success, admission has no table and
changes nothing. Without `usage.prometheus.url` the refresh does nothing at all.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from policies.kernel.background import Task
from policies.vocabulary.backoff import Backoff
from webhook.cluster.model import ClusterModel
from webhook.config import Config
from webhook.usage.prometheus import PrometheusUnavailable
from webhook.usage.service import UsageNotConfigured, UsageService
from webhook.usage.table import UsageTable, build_table

log = logging.getLogger("kgwe.usage")


class UsageRefresher:
    def __init__(self, service: UsageService, config: Callable[[], Config], model: Callable[[], ClusterModel | None],
                 clock: Callable[[], float] = time.time) -> None:
        self._service = service
        self._config = config
        self._model = model
        self._clock = clock
        self._table: UsageTable | None = None  # replaced whole: readers need no lock
        self.last_error: str | None = None

    def refresh_once(self) -> UsageTable | None:
        """Read, work out and swap in a new table; the table, or None when no Prometheus is configured.
        Raises PrometheusUnavailable (the last table is kept)."""
        try:
            history, report = self._service.read_all()
        except UsageNotConfigured:
            self._table = None
            return None
        except PrometheusUnavailable as exc:
            self.last_error = str(exc)
            raise
        model = self._model()
        table = model.table if model is not None else self._config().accelerator_table()
        self._table = build_table(report, history, table, self._clock())
        self.last_error = None
        return self._table

    def current(self) -> UsageTable | None:
        """The table admission may use now: None before the first refresh and once it is too old."""
        table = self._table
        if table is None:
            return None
        if self._clock() - table.computed_at > self._config().rightsizing.stale_seconds:
            return None
        return table

    def set_table(self, table: UsageTable | None) -> None:
        """Swap in a table made elsewhere (tests, `kgwe review` with a recorded table)."""
        self._table = table

    def task(self) -> Task:
        """The periodic task of `kgwe serve` (the interval read at start; a new one takes a restart)."""
        interval = self._config().rightsizing.refresh_seconds
        return Task(
            "usage-table", self.refresh_once, interval=interval, run_at_start=True,
            backoff=Backoff(min(30.0, interval), interval),
            on_error=lambda exc: log.warning("usage table not refreshed (the last one is kept until "
                                             "rightsizing.staleAfter): %s", exc),
        )
