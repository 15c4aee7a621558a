"""Costs over a window and budget states, read from the right source (the I/O of the wing).

Prometheus mode (`usage.prometheus.url` set, `costs.source: auto`): the history is KGWE's own per-pod cost
series in Prometheus (history.py). Directory mode (no Prometheus, or `costs.source: directory`): the same
figures from the lifetimes of the pods the cluster model holds (rates.py, ledger.py); finished pods count
only as long as they are kept (a YAML directory keeps them; an API server's garbage collector does not).
The current hourly rate always comes from the pods running now. Answers are kept `costs.cacheSeconds`.

Budget states for admission (`BudgetBook`) never wait for Prometheus: they are the last figures read, and
a read older than the cache starts a refresh on a thread of its own (until the first answers, no budget
is judged; in directory mode the first is computed at once, from memory).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING

from policies.quota.budget import BudgetSpec, BudgetState, budget_of
from policies.quota.model import tenant_of_quota
from webhook.cluster.model import ClusterModel
from webhook.config import Config
from webhook.spend.history import idle_usage, prometheus_buckets, prometheus_spend
from webhook.spend.ledger import PodSpend, bucket_spend, by_tenant, directory_spend, tenant_cost_seconds
from webhook.spend.memo import RateMemo
from webhook.spend.metrics import export
from webhook.spend.rates import PodRate, current_hourly
from webhook.spend.window import Window, month_of, parse_window, stamp
from webhook.usage.prometheus import PrometheusClient, PrometheusClients, PrometheusUnavailable

if TYPE_CHECKING:  # the report's pydantic models are built by window_costs; budgets (admission) need none of them
    from webhook.spend.report import WindowCosts

log = logging.getLogger("kgwe.spend")
ZERO = Decimal(0)
Visible = Callable[[str], bool]


@dataclass(frozen=True)
class MonthFigures:
    start: float
    end: float
    now: float
    spends: list[PodSpend]  # this month so far
    rates: dict[str, Decimal]  # per tenant, now
    states: dict[str, BudgetState]


class SpendService:
    def __init__(self, config: Callable[[], Config], model: Callable[[], ClusterModel | None],
                 prometheus_url: str | None = None, clock: Callable[[], float] = time.time) -> None:
        self._config = config
        self._model = model
        self._clock = clock
        self._lock = threading.Lock()
        self._cache: dict[tuple[str, float | None], tuple[float, WindowCosts]] = {}
        self._clients = PrometheusClients(prometheus_url)
        self.rates = RateMemo()

    # -- sources ---------------------------------------------------------------------------------
    def client(self, config: Config) -> PrometheusClient | None:
        return self._clients.for_settings(config.usage.prometheus)

    def source(self, config: Config) -> str:
        return "prometheus" if config.costs.source == "auto" and self.client(config) is not None else "directory"

    def _spends(self, config: Config, rates: list[PodRate], window: Window, now: float) -> list[PodSpend]:
        client = self.client(config)
        if self.source(config) == "prometheus" and client is not None:
            spends = prometheus_spend(client, window, config.costs.step_seconds)
        else:
            spends = directory_spend(rates, window.start, window.end, now)
        if client is not None:
            try:
                idle = idle_usage(client, window, config.costs.step_seconds, config.rightsizing.idle_below)
            except PrometheusUnavailable as exc:
                log.warning("idle cost unknown: %s", exc)
                idle = {}
            for spend in spends:
                spend.idle_seconds = idle.get((spend.namespace, spend.pod))
        return spends

    # -- the views -------------------------------------------------------------------------------
    def window_costs(self, window_text: str, visible: Visible | None = None, at: float | None = None,
                     remember: bool = True) -> WindowCosts:
        """Costs over `window_text` (`30d`) ending at `at` (now); `remember`: a reader of every namespace's
        answer read from and kept in the cache (warm.py keeps its own, as JSON). Raises WindowError,
        PrometheusUnavailable."""
        from webhook.spend.report import build_window_costs  # the server's API routes import it at start

        seconds = parse_window(window_text)
        config = self._config()
        now = self._clock() if at is None else at
        key = (window_text, at)
        if visible is None and remember:
            with self._lock:
                cached = self._cache.get(key)
            if cached is not None and self._clock() - cached[0] < config.costs.cache_seconds:
                return cached[1]
        step = config.costs.step_seconds
        window = Window.ending(now, seconds, step, window_text)
        rates = self._rates(config)
        spends = self._spends(config, rates, window, now)
        client = self.client(config)
        if self.source(config) == "prometheus" and client is not None:
            buckets = prometheus_buckets(client, window, step)
        else:
            buckets = bucket_spend(rates, window.buckets(), now)
        month = self.month(now, rates)
        if visible is not None:
            spends = [s for s in spends if visible(s.namespace)]
            rates = [r for r in rates if visible(r.namespace)]
            tenants = {r.tenant for r in rates} | {s.tenant for s in spends}
            buckets = {t: v for t, v in buckets.items() if t in tenants}
            month = MonthFigures(month.start, month.end, month.now,
                                 [s for s in month.spends if visible(s.namespace)], current_hourly(rates),
                                 {t: s for t, s in month.states.items() if t in tenants})
        doc = build_window_costs(
            window, self.source(config), step if self.source(config) == "prometheus" else None, spends, buckets,
            (month.start, month.end, month.spends, month.rates, month.now), month.states,
        )
        if visible is None and remember:
            with self._lock:
                self._cache[key] = (self._clock(), doc)
        return doc

    def _rates(self, config: Config) -> list[PodRate]:
        model = self._model()
        return self.rates.rates(model, config) if model is not None else []

    def month(self, now: float | None = None, rates: list[PodRate] | None = None) -> MonthFigures:
        """This month so far, the rate now, and each budgeted tenant's state."""
        config = self._config()
        now = self._clock() if now is None else now
        rates = self._rates(config) if rates is None else rates
        start, end = month_of(now)
        step = config.costs.step_seconds
        # The month so far, on the same grid as every window (its start is a whole number of steps).
        window = Window(start, max(start + step, (now // step) * step), "month")
        if self.source(config) == "prometheus" and (client := self.client(config)) is not None:
            spends = prometheus_spend(client, window, step)
        else:
            spends = directory_spend(rates, start, now, now)
        hourly = current_hourly(rates)
        model = self._model()
        budgets = budgets_of(model) if model is not None else {}
        return MonthFigures(start, end, now, spends, hourly,
                            self._states(config, budgets, by_tenant(spends), hourly, now, end))

    def budget_states(self, now: float | None = None) -> dict[str, BudgetState]:
        """`month(now).states`, for admission and the quota controller: with no TenantQuota budgeted no pod is read,
        and from the pods' lifetimes (no Prometheus) each budgeted tenant's cost is summed without a record per pod
        (issue 36: each refresh walked 150,000 pods' spends, budgets or none)."""
        config = self._config()
        model = self._model()
        budgets = budgets_of(model) if model is not None else {}
        if not budgets:
            return {}
        if self.source(config) == "prometheus":
            return self.month(now).states
        now = self._clock() if now is None else now
        rates = self._rates(config)
        start, end = month_of(now)
        spent = tenant_cost_seconds(rates, start, now, now, budgets)
        return self._states(config, budgets, spent, current_hourly(rates), now, end)

    def _states(self, config: Config, budgets: dict[str, BudgetSpec], spent: dict[str, Decimal],
                hourly: dict[str, Decimal], now: float, end: float) -> dict[str, BudgetState]:
        hours_left = Decimal(f"{max(0.0, end - now):.3f}") / 3600
        return {tenant: BudgetState(
            tenant=tenant, spec=spec, spent=spent.get(tenant, ZERO) / 3600, hourly=hourly.get(tenant, ZERO),
            hours_left=hours_left, currency=config.pricing.currency, month_end=stamp(end),
        ) for tenant, spec in budgets.items()}


def budgets_of(model: ClusterModel) -> dict[str, BudgetSpec]:
    """Each tenant's budget (the smallest among its TenantQuotas'), in the order of their TenantQuotas."""
    grouped: dict[str, list[dict[str, object]]] = {}
    for quota in model.tenant_quotas.values():
        grouped.setdefault(tenant_of_quota(quota), []).append(quota)
    budgets: dict[str, BudgetSpec] = {}
    for tenant, quotas in grouped.items():
        spec = budget_of(quotas)
        if spec is not None:
            budgets[tenant] = spec
    return budgets


class BudgetBook:
    """The budget states admission and the quota controller read: computed at most every
    `costs.cacheSeconds`; with Prometheus as the source, refreshed on a thread while the last states serve."""

    def __init__(self, service: SpendService, config: Callable[[], Config],
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.service = service
        self._config = config
        self._clock = clock
        self._lock = threading.Lock()
        self._states: dict[str, BudgetState] = {}
        self._at: float | None = None
        self._refreshing = False
        self.last_error: str | None = None
        self.on_refresh: list[Callable[[dict[str, BudgetState]], None]] = []

    def states(self) -> dict[str, BudgetState]:
        config = self._config()
        fresh = self._at is not None and self._clock() - self._at < config.costs.cache_seconds
        if fresh:
            return self._states
        if self._at is None and self.service.source(config) == "directory":
            self.refresh()  # the first answer, from memory: there is nothing older to serve meanwhile
        else:
            # Admission runs on the event loop: a refresh (Prometheus, or every pod of the snapshot) never does.
            self._refresh_in_background()
        return self._states

    def refresh(self) -> dict[str, BudgetState]:
        try:
            states = self.service.budget_states()
        except PrometheusUnavailable as exc:
            # Keep the last states: a budget does not lapse because Prometheus is away for a while.
            self.last_error = str(exc)
            log.warning("budget states not refreshed: %s", exc)
            with self._lock:
                self._at = self._clock()
            return self._states
        with self._lock:
            self._states, self._at, self.last_error = states, self._clock(), None
        export(states)
        for listener in self.on_refresh:
            listener(states)
        return states

    def _refresh_in_background(self) -> None:
        with self._lock:
            if self._refreshing:
                return
            self._refreshing = True

        def run() -> None:
            try:
                self.refresh()
            finally:
                with self._lock:
                    self._refreshing = False

        threading.Thread(target=run, name="kgwe-budget-refresh", daemon=True).start()
