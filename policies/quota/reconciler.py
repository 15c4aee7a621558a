"""Keeps each TenantQuota's `status` true to the pods: `status.used` recomputed, spent reservations dropped.

Run periodically by `kgwe serve`. A reservation is spent when it has expired (its pod never appeared: a
later admission step refused it, or the pod was deleted) or when the pod list has shown its pod for longer
than `settle_seconds`, so that every replica's pod cache has had time to see the pod before the
reservation stops standing in for it.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Iterable
from decimal import Decimal
from typing import Any

from policies.quota.check import UsageLine, publish_metrics, usage_lines
from policies.quota.model import PodCharge, quota_name, same_pod, tenant_of_quota
from policies.quota.store import QuotaStatus, QuotaStore, QuotaUnavailable, UsedEntry, update_status

log = logging.getLogger(__name__)


class QuotaReconciler:
    def __init__(
        self,
        store: QuotaStore,
        price_of: Callable[[str], Decimal | None],
        *,
        settle_seconds: float = 10.0,
        clock: Callable[[], float] = time.time,
        timeout_seconds: float = 10.0,
    ) -> None:
        self.store = store
        self.price_of = price_of
        self.settle_seconds = settle_seconds
        self.clock = clock
        self.timeout_seconds = timeout_seconds

    def reconcile_once(self, quotas: list[dict[str, Any]], charges: Iterable[PodCharge]) -> None:
        """`charges`: every unfinished pod in the cluster. A store failure is logged; the next run retries."""
        pods = list(charges)
        lines: list[UsageLine] = []
        by_tenant: dict[str, list[dict[str, Any]]] = {}
        for quota in quotas:
            by_tenant.setdefault(tenant_of_quota(quota), []).append(quota)
        for tenant, tenant_quotas in sorted(by_tenant.items()):
            tenant_lines = usage_lines(tenant, tenant_quotas, pods, self.price_of)
            lines.extend(tenant_lines)
            for quota in tenant_quotas:
                name = quota_name(quota)
                used = _used_entries([line for line in tenant_lines if line.quota == name])
                try:
                    update_status(
                        self.store,
                        name,
                        functools.partial(self._settled, used=used, pods=pods),
                        deadline=time.monotonic() + self.timeout_seconds,
                    )
                except QuotaUnavailable as exc:
                    log.warning("TenantQuota %s: status not reconciled: %s", name, exc)
        # Series of deleted quotas or limits must disappear, not freeze at their last value.
        publish_metrics(lines, every_tenant=True)

    def _settled(
        self, status: QuotaStatus, *, used: tuple[UsedEntry, ...], pods: list[PodCharge]
    ) -> tuple[QuotaStatus, None]:
        now = self.clock()
        kept = tuple(
            r
            for r in status.reservations
            if r.expires_at > now
            and not (now - r.created_at >= self.settle_seconds and any(same_pod(p, r.pod, r.pod_uid) for p in pods))
        )
        return QuotaStatus(kept, used), None


def _used_entries(lines: Iterable[UsageLine]) -> tuple[UsedEntry, ...]:
    entries: dict[Any, UsedEntry] = {}
    for line in lines:
        memory = line.used_memory if line.limit_memory is not None else None
        entries.setdefault(line.key, UsedEntry(line.key, line.used_gpus, memory))
    return tuple(entries[key] for key in sorted(entries))
