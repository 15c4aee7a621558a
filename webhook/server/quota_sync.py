"""The periodic TenantQuota reconciliation of `kgwe serve` (see policies/quota/reconciler.py), as a background task."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from policies.quota.reconciler import QuotaReconciler
from webhook.runtime import usage_charges

if TYPE_CHECKING:
    from webhook.runtime import Runtime

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

    def sync_once(self) -> None:
        model = self.runtime.store.snapshot()
        self.reconciler.reconcile_once(list(model.tenant_quotas.values()), usage_charges(model))

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            if not self.is_leader():
                continue
            try:
                # API writes: off the event loop.
                await asyncio.to_thread(self.sync_once)
            except Exception:
                log.exception("quota reconciliation failed; the next run retries")
