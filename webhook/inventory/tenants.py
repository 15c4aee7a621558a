"""The tenant view (`/api/v1/tenants`, `kgwe tenants`): per tenant, its TenantQuotas, namespaces and
groups, its use against every limit (pods released by the quota controller), the pods that wait for quota
and why, and the hourly cost of its running pods."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from policies.quota.model import format_memory, quota_name, tenant_of_quota
from policies.quota.usage import UsageLine, usage_lines
from policies.vocabulary.objects import ObjectView
from webhook.inventory.capacity import Inventory
from webhook.inventory.numbers import ZERO, money_text, number, utc_stamp
from webhook.read_seams import QUOTA_READS


def _limit_row(line: UsageLine) -> dict[str, Any]:
    return {
        "kind": line.key.kind,
        "name": line.key.name,
        "quota": line.quota,
        "gpus": number(line.limit_gpus) if line.limit_gpus is not None else None,
        "used": number(line.used_gpus),
        "gpuMemory": format_memory(line.limit_memory) if line.limit_memory is not None else None,
        "usedMemory": format_memory(line.used_memory) if line.limit_memory is not None else None,
    }


def tenant_usage(inventory: Inventory) -> dict[str, list[UsageLine]]:
    """Use against every limit, per tenant that has a TenantQuota."""
    quotas_by_tenant: dict[str, list[dict[str, Any]]] = {}
    for quota in sorted(inventory.model.tenant_quotas.values(), key=quota_name):
        quotas_by_tenant.setdefault(tenant_of_quota(quota), []).append(quota)
    price_of = inventory.config.price_per_gpu_hour
    return {
        tenant: usage_lines(tenant, quotas, inventory.charges, price_of)
        for tenant, quotas in quotas_by_tenant.items()
    }


def tenants_view(inventory: Inventory, visible: Callable[[str], bool] | None = None) -> dict[str, Any]:
    """Every tenant; with `visible` (a reader's namespaces), only tenants with a namespace it passes, their
    namespaces, pods and cost in those only. Limits and their use stay the tenant's whole (what a quota
    refusal tells any of its members)."""
    model = inventory.model
    usage = tenant_usage(inventory)
    waiting = inventory.waiting
    if waiting is None:
        waiting = QUOTA_READS.value.waiting_rows(model, inventory.config)
    records: dict[str, dict[str, Any]] = {}

    def record(tenant: str) -> dict[str, Any]:
        if tenant not in records:
            records[tenant] = {"quotas": set(), "namespaces": set(), "groups": set(), "cost": ZERO, "pods": 0,
                               "pending": 0}
        return records[tenant]

    for quota in model.tenant_quotas.values():
        spec = ObjectView(quota).spec
        entry = record(tenant_of_quota(quota))
        entry["quotas"].add(quota_name(quota))
        entry["namespaces"].update(str(n) for n in spec.get("namespaces") or [])
        entry["groups"].update(str(g) for g in spec.get("groups") or [])
    for namespace, tenant in inventory.namespace_tenants.items():
        if tenant in records:
            records[tenant]["namespaces"].add(namespace)
    for cost in inventory.pod_costs:
        if visible is not None and not visible(cost.namespace):
            continue
        entry = record(cost.tenant)
        entry["namespaces"].add(cost.namespace)
        entry["cost"] += cost.hourly or ZERO
        entry["pods"] += 1
    # A tenant whose only GPU pod waits (for capacity, for quota) is a tenant too: it is charged once it runs.
    for pending in inventory.pending:
        if visible is not None and not visible(pending.namespace):
            continue
        entry = record(pending.tenant)
        entry["namespaces"].add(pending.namespace)
        entry["pending"] += 1
    if visible is not None:
        for entry in records.values():
            entry["namespaces"] = {n for n in entry["namespaces"] if visible(n)}
        records = {tenant: entry for tenant, entry in records.items() if entry["namespaces"]}
    tenants = [
        {
            "tenant": tenant,
            "quotas": sorted(entry["quotas"]),
            "namespaces": sorted(entry["namespaces"]),
            "groups": sorted(entry["groups"]),
            "limits": [_limit_row(line) for line in usage.get(tenant, [])],
            # Pods the kgwe.io/quota gate holds, and why each waits (SPEC section 10).
            "waiting": waiting.get(tenant, {"pods": 0, "gpus": "0", "pending": []}),
            "hourlyCost": money_text(entry["cost"]),
            "pods": entry["pods"],
            # Unbound GPU pods (waiting for capacity or behind the quota gate): not running, not charged yet.
            "pendingPods": entry["pending"],
        }
        for tenant, entry in sorted(records.items())
    ]
    return {"generatedAt": utc_stamp(inventory.generated_at), "currency": inventory.config.pricing.currency,
            "tenants": tenants}
