"""Prometheus metrics of the policy layer, on prometheus_client's default registry (served at /metrics).

Defined once here so the webhook, quotas and RBAC count into the same series.
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge

ADMISSION_REFUSALS = Counter(
    "kgwe_admission_refusals",
    "Pods the validating webhook refused, by reason (quota, rbac, placement, policy, ...).",
    ["reason"],
)

QUOTA_USED = Gauge(
    "kgwe_quota_used",
    "GPU-equivalents in use by a tenant's unfinished pods; type is an accelerator type id or profile:<name>.",
    ["tenant", "type"],
)

QUOTA_LIMIT = Gauge(
    "kgwe_quota_limit",
    "A tenant's tightest GPU limit from its TenantQuota objects; type is an accelerator type id or profile:<name>.",
    ["tenant", "type"],
)


def record_refusal(reason: str) -> None:
    ADMISSION_REFUSALS.labels(reason=reason).inc()
