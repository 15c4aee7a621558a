"""The quota queue of one snapshot, as the Tenants view, `kgwe explain` and the TenantQuota status show it."""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal
from typing import Any

from policies.quota.model import format_gpus
from policies.quota.queue import TenantQueue, wait_message
from webhook.cluster.model import ClusterModel
from webhook.config import Config
from webhook.quotas.snapshot_picture import picture_of
from webhook.quotas.waiters import QuotaPicture, plan_tenant

MAX_LISTED = 50  # waiting pods listed per tenant in a view (the count is always whole)


def tenant_queues(model: ClusterModel, config: Config) -> dict[str, TenantQueue]:
    """Per tenant with a TenantQuota: what the controller would release now and who waits, and why."""
    out: dict[str, TenantQueue] = {}
    for tenant, picture in picture_of(model).tenants.items():
        out[tenant] = plan_tenant(model, config, picture)
    return out


def waiting_rows(model: ClusterModel, config: Config) -> dict[str, dict[str, Any]]:
    """Per tenant: the pods that wait for quota (count, GPUs, and the first `MAX_LISTED` with why)."""
    return rows_of(model, config, picture_of(model))


def remembered_waiting_rows() -> Callable[[ClusterModel, Config], dict[str, dict[str, Any]]]:
    """`waiting_rows` for the API router's inventory (webhook/inventory/cache.py InventoryMemo): from admission's
    picture (`picture_of`, webhook/quotas/snapshot_picture.py), which reads only the pods that changed."""
    return waiting_rows


def rows_of(model: ClusterModel, config: Config, picture: QuotaPicture) -> dict[str, dict[str, Any]]:
    rows: dict[str, dict[str, Any]] = {}
    for tenant, tenant_picture in picture.tenants.items():
        listed: list[dict[str, Any]] = []
        pods = 0
        gpus = Decimal(0)
        for wait in plan_tenant(model, config, tenant_picture).waits:
            for ask in wait.waiter.asks:
                pods += 1
                gpus += ask.gpus
                if len(listed) < MAX_LISTED:
                    listed.append({"pod": ask.pod, "gpus": format_gpus(ask.gpus), "why": wait_message(tenant, wait)})
        for waiter, why in tenant_picture.incomplete:
            for ask in waiter.asks:
                pods += 1
                gpus += ask.gpus
                if len(listed) < MAX_LISTED:
                    listed.append({"pod": ask.pod, "gpus": format_gpus(ask.gpus), "why": f"{tenant}: {why}"})
        rows[tenant] = {"pods": pods, "gpus": format_gpus(gpus), "pending": listed}
    return rows


def why_waiting(model: ClusterModel, config: Config, pod_key: str) -> str | None:
    """Why this gated pod waits for quota now, in the words its condition carries; None if it would be released."""
    for tenant, queue in tenant_queues(model, config).items():
        for wait in queue.waits:
            if any(ask.pod == pod_key for ask in wait.waiter.asks):
                return wait_message(tenant, wait)
        for waiter, why in picture_of(model).tenants[tenant].incomplete:
            if any(ask.pod == pod_key for ask in waiter.asks):
                return f"{tenant}: {why}"
    return None
