"""The periodic TenantQuota reconciliation of `kgwe serve` (see policies/quota/reconciler.py), as a background task."""

from __future__ import annotations

import logging
from collections.abc import Callable

from policies.background import Task
from policies.quota.reconciler import QuotaReconciler
from webhook.runtime import Runtime, usage_charges

log = logging.getLogger(__name__)


class QuotaSync:
    """Every `interval` seconds, on the leader only: recompute `status.used`, drop spent reservations."""

    def __init__(self, runtime: Runtime, is_leader: Callable[[], bool], interval: float = 10.0) -> None:
        if runtime.quotas is None:
            raise ValueError("the runtime has no quota service")
        self.runtime = runtime
        self.is_leader = is_leader
        self.interval = interval
        # Prices follow configuration reloads: looked up on the runtime's current configuration each time.
        self.reconciler = QuotaReconciler(
            runtime.quotas.store, lambda type_id: runtime.config.price_per_gpu_hour(type_id)
        )
        self.task = Task("quota-sync", self.sync_once, interval=interval, leader_only=True,
                         is_leader=lambda: self.is_leader(),
                         on_error=lambda _exc: log.exception("quota reconciliation failed; the next run retries"))

    def sync_once(self) -> None:
        model = self.runtime.store.snapshot()
        self.reconciler.reconcile_once(list(model.tenant_quotas.values()), usage_charges(model))
