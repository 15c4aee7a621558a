"""One read of usage turned into a report, for the command line and the API (the I/O of the wing).

`UsageService.report` reads the history from the configured Prometheus, works out recommendations and idle
pods against the newest cluster snapshot, and keeps the answer `usage.cacheSeconds` so that a page and
its refreshes cost Prometheus one read. Reports of every namespace also set the usage metrics.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from webhook.cluster.model import ClusterModel
from webhook.config import Config
from webhook.usage.history import UsageHistory, read_history
from webhook.usage.metrics import export
from webhook.usage.prometheus import PrometheusClient, PrometheusClients, PrometheusUnavailable
from webhook.usage.views import UsageReport, build_report


class UsageNotConfigured(RuntimeError):
    """No Prometheus to read usage from."""


class UsageService:
    def __init__(self, config: Callable[[], Config], model: Callable[[], ClusterModel | None],
                 prometheus_url: str | None = None, clock: Callable[[], float] = time.time) -> None:
        self._config = config
        self._model = model
        self._clock = clock
        self._lock = threading.Lock()
        self._cache: dict[tuple[str | None, float | None], tuple[float, UsageReport]] = {}
        self._clients = PrometheusClients(prometheus_url)

    def _client(self, config: Config) -> PrometheusClient:
        client = self._clients.for_settings(config.usage.prometheus)
        if client is None:
            raise UsageNotConfigured(
                "no Prometheus to read GPU usage from: set usage.prometheus.url in the configuration "
                "(or give --prometheus URL)"
            )
        return client

    def read_all(self) -> tuple[UsageHistory, UsageReport]:
        """Every namespace's history up to now and its report, read past the cache (the background refresh);
        the report also answers the API until it is `usage.cacheSeconds` old. Raises as `report`."""
        config = self._config()
        client = self._client(config)
        now = self._clock()
        history = read_history(client, config.usage, now, None)
        report = build_report(history, self._model(), config)
        export(report)
        with self._lock:
            self._cache[(None, None)] = (now, report)
        return history, report

    def report(self, namespace: str | None = None, at: float | None = None) -> UsageReport:
        """The report of `namespace` (every namespace when None) over the lookback ending at `at` (now when
        None). Raises UsageNotConfigured or PrometheusUnavailable."""
        config = self._config()
        client = self._client(config)
        now = self._clock()
        key = (namespace, at)
        with self._lock:
            cached = self._cache.get(key)
        if cached is not None and now - cached[0] < config.usage.cache_seconds:
            return cached[1]
        history = read_history(client, config.usage, at if at is not None else now, namespace)
        report = build_report(history, self._model(), config)
        if namespace is None:
            export(report)
        with self._lock:
            self._cache[key] = (now, report)
        return report


__all__ = ["PrometheusUnavailable", "UsageNotConfigured", "UsageService"]
