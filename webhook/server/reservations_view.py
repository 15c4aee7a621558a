"""Quota reservations beside quota use in `/api/v1/tenants` (and so on the UI's Tenants page).

The quota check counts, besides the tenant's pods, the reservations of pods admitted in the last
`quotas.reservationGraceSeconds` that no pod list shows yet. Where no pod ever follows an admission
(`kgwe review`, YAML mode) those reservations hold GPUs for a while, and a refusal saying "8 of 8 in use"
must not contradict a page saying 4: each limit row gets `reserved`, the GPUs such reservations hold now.
"""

from __future__ import annotations

import time
from decimal import Decimal
from typing import Any

from policies.quota.store import QuotaUnavailable

ZERO = Decimal(0)


def _number(value: Decimal) -> int | float:
    return int(value) if value == value.to_integral_value() else float(value)


def live_reservations(quotas: Any, quota_names: set[str], known_pods: set[str], now: float) -> dict[
    tuple[str, str, str], Decimal
]:
    """(quota, limit kind, limit name) -> GPUs reserved by live reservations of pods not in `known_pods`."""
    held: dict[tuple[str, str, str], Decimal] = {}
    for name in sorted(quota_names):
        try:
            status = quotas.store.read(name, timeout=1.0).status
        except (QuotaUnavailable, OSError):
            continue  # the page shows use without reservations rather than fail
        for reservation in status.reservations:
            if reservation.expires_at <= now or reservation.pod in known_pods:
                continue
            key = (name, reservation.key.kind, reservation.key.name)
            held[key] = held.get(key, ZERO) + reservation.gpus
    return held


def with_reservations(doc: dict[str, Any], quotas: Any, known_pods: set[str], now: float | None = None) -> dict[
    str, Any
] | None:
    """A copy of the tenants document with `reserved` on each limit row, or None when nothing is reserved
    (the cached document is then served as it is)."""
    names = {str(row.get("quota")) for tenant in doc.get("tenants", []) for row in tenant.get("limits", [])}
    if quotas is None or not names:
        return None
    held = live_reservations(quotas, names, known_pods, time.time() if now is None else now)
    if not held:
        return None
    tenants = []
    for tenant in doc.get("tenants", []):
        limits = []
        for row in tenant.get("limits", []):
            reserved = held.get((str(row.get("quota")), str(row.get("kind")), str(row.get("name"))), ZERO)
            limits.append({**row, "reserved": _number(reserved)})
        tenants.append({**tenant, "limits": limits})
    return {**doc, "tenants": tenants}
