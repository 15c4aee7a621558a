"""Utilisation in the node view (`/api/v1/nodes`): per node and per accelerator type, the GPU-equivalents
allocated to pods beside what they used in the newest window of the usage table (pure).

Allocated is what the node view counts as used by pods (whole GPUs, and MIG slices as slices/7 of a GPU);
used is the table's busy GPU-equivalents (engine activity) and memory. A node the table has no row for
(no pod held GPUs there in the newest window, or no exporter runs there) gets `null`: unknown, not idle.
"""

from __future__ import annotations

from typing import Any

from webhook.usage.table import UsageTable


def _equivalents(used: dict[str, Any]) -> float:
    total = 0.0
    for resource, amount in used.items():
        if not isinstance(amount, int | float):
            continue
        if resource.endswith("/gpu"):
            total += amount
        elif resource.startswith("nvidia.com/mig-"):
            head = resource.removeprefix("nvidia.com/mig-").split("g.", 1)[0]
            total += amount * (int(head) / 7 if head.isdigit() and 0 < int(head) <= 7 else 1.0)
    return total


def with_utilisation(document: dict[str, Any], table: UsageTable | None) -> dict[str, Any]:
    """The node view with `utilisation` on each node and type, and `utilisationAt` (the table's newest window,
    or null when there is no table yet). Callers add it only where a Prometheus is configured."""
    nodes = []
    per_type: dict[str, dict[str, float]] = {}
    for row in document.get("nodes", []):
        allocated = round(_equivalents(row.get("used") or {}), 3)
        found = table.nodes.get(row["name"]) if table is not None else None
        utilisation = None
        if found is not None:
            utilisation = {
                "allocatedGpuEquivalents": allocated, "busyGpuEquivalents": found.busy_gpu_equivalents,
                "memoryUsedMib": found.memory_used_mib, "devicesInUse": found.devices, "pods": found.pods,
            }
        nodes.append({**row, "utilisation": utilisation})
        key = row.get("acceleratorType") or ""
        entry = per_type.setdefault(key, {"allocated": 0.0, "busy": 0.0, "memory": 0.0, "known": 0.0})
        entry["allocated"] += allocated
        if found is not None:
            entry["busy"] += found.busy_gpu_equivalents
            entry["memory"] += found.memory_used_mib
            entry["known"] += 1
    types = []
    for row in document.get("types", []):
        totals = per_type.get(row.get("id") or "")
        utilisation = None
        if table is not None and totals is not None:
            utilisation = {
                "allocatedGpuEquivalents": round(totals["allocated"], 3),
                "busyGpuEquivalents": round(totals["busy"], 3),
                "memoryUsedMib": round(totals["memory"]), "nodesWithUsage": int(totals["known"]),
            }
        types.append({**row, "utilisation": utilisation})
    return {**document, "nodes": nodes, "types": types,
            "utilisationAt": table.window_end if table is not None else None}
