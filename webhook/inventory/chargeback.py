"""The cost view (`/api/v1/costs`, `kgwe costs`): chargeback of the pods running now, by tenant and
accelerator type, as hourly, daily and monthly rates, with each pod's cost and where it came from."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from webhook.inventory.capacity import Inventory
from webhook.inventory.numbers import HOURS_PER_MONTH, ZERO, money_text, utc_stamp


def costs_view(inventory: Inventory, visible: Callable[[str], bool] | None = None) -> dict[str, Any]:
    """Chargeback: the hourly rate now, by tenant and accelerator type, from the pods running now (with
    `visible`, a reader's namespaces: from the pods of the namespaces it passes only)."""
    pod_costs = [c for c in inventory.pod_costs if visible is None or visible(c.namespace)]
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    for cost in pod_costs:
        row = rows.setdefault(
            (cost.tenant, cost.type_id),
            {"tenant": cost.tenant, "acceleratorType": cost.type_id, "pods": 0, "unpricedPods": 0, "cost": ZERO},
        )
        row["pods"] += 1
        if cost.hourly is None:
            row["unpricedPods"] += 1
        else:
            row["cost"] += cost.hourly
    total = sum((row["cost"] for row in rows.values()), ZERO)
    out_rows = []
    for key in sorted(rows):
        row = rows[key]
        cost = row.pop("cost")
        row["hourlyCost"] = money_text(cost)
        row["dailyCost"] = money_text(cost * 24)
        row["monthlyCost"] = money_text(cost * HOURS_PER_MONTH)
        out_rows.append(row)
    return {
        "generatedAt": utc_stamp(inventory.generated_at),
        "currency": inventory.config.pricing.currency,
        "rows": out_rows,
        "hourlyCost": money_text(total),
        "pods": [
            {"namespace": c.namespace, "pod": c.name, "tenant": c.tenant, "acceleratorType": c.type_id,
             "hourlyCost": money_text(c.hourly) if c.hourly is not None else None, "source": c.source}
            for c in sorted(pod_costs, key=lambda c: (c.namespace, c.name))
        ],
    }
