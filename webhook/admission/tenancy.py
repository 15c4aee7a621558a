"""Whose a request is: the requester's tenant for the namespace and the `TenantQuota` objects that apply.

Resolved from the namespace's labels and the requester's groups against the TenantQuotas
(`policies.quota.model.resolve_tenant`). Every pod request asks it (the tenant is an output), and the
quota gate asks it again, so `TenancyMemo` remembers it per snapshot: one team's pods ask the same all day.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from policies.quota.model import QuotaLimit, quota_limits, resolve_tenant
from webhook.admission.request import AdmissionRequest
from webhook.cluster.model import ClusterModel

TENANCY_CACHE_SIZE = 4096  # (namespace, groups) pairs per snapshot; past it the memo starts again


def tenant_and_quotas(request: AdmissionRequest, model: ClusterModel) -> tuple[str, list[dict[str, Any]]]:
    """The requester's tenant for this namespace and the `TenantQuota` objects that apply to it."""
    return resolve_tenant(
        request.namespace,
        model.namespace_labels(request.namespace),
        request.user.groups,
        list(model.tenant_quotas.values()),
    )


@dataclass(frozen=True)
class Tenancy:
    tenant: str
    quotas: list[dict[str, Any]]
    limits: list[QuotaLimit]  # `quota_limits` of each quota, in order


@dataclass
class TenancyMemo:
    """`tenant_and_quotas` and the quotas' limits, remembered per snapshot, namespace and groups."""

    # One tuple: a reader never sees one snapshot's table as another's.
    _table: tuple[int, dict[tuple[str, tuple[str, ...]], Tenancy]] = field(default=(-1, {}), repr=False)

    def of(self, request: AdmissionRequest, model: ClusterModel) -> Tenancy:
        generation, cache = self._table
        if generation != model.generation or len(cache) >= TENANCY_CACHE_SIZE:
            cache = {}
            self._table = (model.generation, cache)
        key = (request.namespace, tuple(request.user.groups))
        found = cache.get(key)
        if found is None:
            tenant, quotas = tenant_and_quotas(request, model)
            found = cache[key] = Tenancy(tenant, quotas, [limit for quota in quotas for limit in quota_limits(quota)])
        return found
