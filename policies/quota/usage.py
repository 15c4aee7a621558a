"""What each limit of a tenant counts now, from the pods that hold quota: for TenantQuota status, views, metrics.

The same counting as the release queue (`policies/quota/queue.py` `Ledger`): a released pod counts against its
node's type once bound, else against every type it may still land on (one, once KGWE pinned it), and its
profile; a pod still gated by `kgwe.io/quota` holds nothing.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from policies.kernel.metrics import QUOTA_LIMIT, QUOTA_USED, add_series, replace_series
from policies.quota.model import LimitKey, PodCharge, PriceOf, charge_belongs_to, quota_limits
from policies.quota.queue import Ledger


@dataclass(frozen=True)
class UsageLine:
    tenant: str
    quota: str
    key: LimitKey
    used_gpus: Decimal
    limit_gpus: Decimal | None
    used_memory: Decimal
    limit_memory: Decimal | None


def usage_lines(
    tenant: str, quotas: list[dict[str, Any]], usage_pods: Iterable[PodCharge], price_of: PriceOf | None = None
) -> list[UsageLine]:
    """Use per limit of the tenant's TenantQuotas, from its released pods (gated ones hold nothing)."""
    del price_of  # a pod is charged the types it may land on, whatever they cost
    limits = [limit for quota in quotas for limit in quota_limits(quota)]
    ledger = Ledger(limits)
    for pod in usage_pods:
        if not pod.gated and charge_belongs_to(pod, tenant, quotas):
            ledger.charge(pod)
    lines = [
        UsageLine(tenant, limit.quota, limit.key, ledger.gpus[limit.key], limit.gpus, ledger.memory[limit.key],
                  limit.gpu_memory)
        for limit in limits
    ]
    publish_metrics(lines)
    return lines


def publish_metrics(lines: Iterable[UsageLine], *, every_tenant: bool = False) -> None:
    """`kgwe_quota_used` and `kgwe_quota_limit` of these lines. With `every_tenant` (a whole view) the series
    of deleted quotas or limits go instead of freezing at their last value."""
    used: dict[tuple[str, ...], float] = {}
    tightest: dict[tuple[str, str], Decimal] = {}
    for line in lines:
        labels = (line.tenant, line.key.metric_type)
        used[labels] = float(line.used_gpus)
        if line.limit_gpus is not None:
            tightest[labels] = min(tightest.get(labels, line.limit_gpus), line.limit_gpus)
    limits: dict[tuple[str, ...], float] = {labels: float(limit) for labels, limit in tightest.items()}
    publish = replace_series if every_tenant else add_series
    publish(QUOTA_USED, used)
    publish(QUOTA_LIMIT, limits)
