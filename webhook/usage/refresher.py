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
from typing import Any

from policies.kernel.background import Task
from policies.vocabulary.backoff import Backoff
from policies.vocabulary.objects import PodView
from webhook.admission.request import AdmissionRequest
from webhook.cluster.model import ClusterModel
from webhook.config import Config
from webhook.usage.prometheus import PrometheusUnavailable
from webhook.usage.service import UsageNotConfigured, UsageService
from webhook.usage.table import UsageTable, WorkloadUsage, build_table
from webhook.workload_owners import workload_of

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

    def workload_usage(self, request: AdmissionRequest, pod: dict[str, Any]) -> WorkloadUsage | None:
        """The row of the pod's workload (a template's: the workload the request names) in the current table;
        admission's usage port (webhook/admission/ports.py `UsageSource`)."""
        table = self.current()
        if table is None:
            return None
        if request.template:
            key = request.workload
        else:
            view = PodView(pod)
            name = view.name or request.name
            key = workload_of(request.namespace, name, pod).key if name or view.controller_owner else ""
        return table.workload(key) if key else None

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


def current_table(runtime: Any) -> UsageTable | None:
    """The usage table a runtime's refresher holds now (the read API's and the UI's nodes, usage and MIG plan);
    None without a refresher, before its first table, or once the table is stale."""
    usage = getattr(runtime, "usage", None)
    return usage.current() if isinstance(usage, UsageRefresher) else None
