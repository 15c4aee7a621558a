"""Tenant quotas per accelerator type and hardware profile: the public surface the webhook uses.

Model and tenant resolution in quota_model, the compare-and-swap store contract and the in-memory store in
quota_store, the API-server store in quota_kube_store, the admission check in quota_check, and the status
reconciler in quota_reconciler.
"""

from policies.quota_check import QuotaDecision, QuotaService, UsageLine
from policies.quota_kube_store import KubeQuotaStore
from policies.quota_model import LimitKey, PodCharge, QuotaLimit, quota_limits, resolve_tenant, tenant_of_quota
from policies.quota_reconciler import QuotaReconciler
from policies.quota_store import InMemoryQuotaStore, QuotaStatus, QuotaStore, QuotaUnavailable, Versioned

__all__ = [
    "InMemoryQuotaStore",
    "KubeQuotaStore",
    "LimitKey",
    "PodCharge",
    "QuotaDecision",
    "QuotaLimit",
    "QuotaReconciler",
    "QuotaService",
    "QuotaStatus",
    "QuotaStore",
    "QuotaUnavailable",
    "UsageLine",
    "Versioned",
    "quota_limits",
    "resolve_tenant",
    "tenant_of_quota",
]
