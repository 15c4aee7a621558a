"""Tenants, their TenantQuota limits, and what one pod counts against them (SPEC section 3).

Pure functions over TenantQuota dicts and PodCharge values: no store, no API. A tenant is the union of
the namespaces (by name or selector) and groups of its TenantQuota objects; every limit of every one of
its objects applies to the tenant's total.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Literal

from policies.vocabulary import keys
from policies.vocabulary.kube_quantity import parse_quantity
from policies.vocabulary.objects import ObjectView
from policies.vocabulary.selectors import parse_selector

log = logging.getLogger(__name__)

TENANT_LABEL = keys.TENANT

MAX_AMOUNT = Decimal(2**63 - 1)

LimitKind = Literal["acceleratorType", "profile"]
PriceOf = Callable[[str], Decimal | None]


@dataclass(frozen=True, slots=True)
class PodCharge:
    """What one pod counts against quotas; built by the webhook from a pod and its admission request."""

    namespace: str
    name: str
    uid: str | None
    candidate_types: tuple[str, ...]  # any order: the most expensive is picked with price_of
    bound_type: str | None  # set once the pod is bound to a node
    profile: str | None  # kgwe.io/profile
    gpu_equivalents: Decimal
    gpu_memory_bytes: Decimal | None  # total GPU memory the pod asks; None when unknown
    # The kgwe.io/tenant annotation the webhook wrote at admission; None for pods admitted without KGWE.
    tenant: str | None = None
    # Labels of the pod's namespace, for TenantQuotas that pick namespaces by selector.
    namespace_labels: Mapping[str, str] = field(default_factory=dict, compare=False, hash=False)
    # Until bound, count against the limit of every candidate type, not only the most expensive: for GPUs
    # a pod asks through ResourceClaims of its own, whose selectors KGWE does not narrow, so the creator
    # picks the type (webhook/dra/claimed.py).
    every_candidate: bool = False
    # Still behind the `kgwe.io/quota` scheduling gate: it waits in its tenant's queue and holds no quota.
    gated: bool = False

    @property
    def pod(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, order=True)
class LimitKey:
    kind: LimitKind
    name: str

    @property
    def metric_type(self) -> str:
        """The `type` label of the quota metrics: the type id, or `profile:<name>`."""
        return self.name if self.kind == "acceleratorType" else f"profile:{self.name}"

    @property
    def described(self) -> str:
        return self.name if self.kind == "acceleratorType" else f"profile {self.name}"


@dataclass(frozen=True)
class QuotaLimit:
    quota: str  # metadata.name of the TenantQuota holding it
    key: LimitKey
    gpus: Decimal | None
    gpu_memory: Decimal | None  # bytes


def quota_name(quota: Mapping[str, Any]) -> str:
    return ObjectView(quota).name


def tenant_of_quota(quota: Mapping[str, Any]) -> str:
    return str((quota.get("spec") or {}).get("tenant") or quota_name(quota))


def parse_amount(value: Any) -> Decimal | None:
    if value is None or isinstance(value, bool):
        return None
    try:
        parsed = Decimal(parse_quantity(str(value)))
        # Bounded like every quantity KGWE reads (policies/vocabulary/quantities.py): `9e999999999` parses, and
        # writing it back (`format_gpus`) would build an integer of a billion digits.
        in_range = parsed.is_finite() and 0 <= parsed <= MAX_AMOUNT
    except (ValueError, ArithmeticError, TypeError):
        return None
    return parsed if in_range else None


def quota_limits(quota: Mapping[str, Any]) -> list[QuotaLimit]:
    """The limits of one TenantQuota; malformed entries are logged and skipped (the CRD schema rejects them)."""
    name = quota_name(quota)
    limits: list[QuotaLimit] = []
    for index, entry in enumerate((quota.get("spec") or {}).get("limits") or []):
        if not isinstance(entry, Mapping):
            continue
        key: LimitKey | None = None
        if entry.get("acceleratorType"):
            key = LimitKey("acceleratorType", str(entry["acceleratorType"]))
        elif entry.get("profile"):
            key = LimitKey("profile", str(entry["profile"]))
        gpus = parse_amount(entry.get("gpus"))
        memory = parse_amount(entry.get("gpuMemory"))
        if key is None or (gpus is None and memory is None):
            log.warning("TenantQuota %s: limits[%d] has no type/profile or no gpus/gpuMemory; ignored", name, index)
            continue
        limits.append(QuotaLimit(name, key, gpus, memory))
    return limits


def _claims_namespace_by_name(quota: Mapping[str, Any], namespace: str) -> bool:
    return namespace in ((quota.get("spec") or {}).get("namespaces") or [])


def _claims_namespace_by_selector(quota: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    raw = (quota.get("spec") or {}).get("namespaceSelector")
    try:
        selector = parse_selector(raw)
    except ValueError:
        log.warning("TenantQuota %s: invalid namespaceSelector; ignored", quota_name(quota))
        return False
    return selector is not None and selector.matches(labels)


def _claims_groups(quota: Mapping[str, Any], groups: Iterable[str]) -> bool:
    wanted = set((quota.get("spec") or {}).get("groups") or [])
    return bool(wanted.intersection(groups))


def resolve_tenant(
    namespace: str,
    namespace_labels: Mapping[str, str],
    groups: list[str],
    quotas: list[dict[str, Any]],
) -> tuple[str, list[dict[str, Any]]]:
    """The tenant a pod is charged to, and the TenantQuota objects whose limits apply to it.

    A namespace listed by name wins over one picked by selector, which wins over the creator's groups;
    among equals, the TenantQuota whose name sorts first decides. Without any match the tenant is the
    namespace label `kgwe.io/tenant`, else the namespace name, and no quota applies. The label never names
    a tenant that has TenantQuotas: those say themselves which namespaces are theirs, and a namespace
    labelled into one would fill its quota with pods no limit of it applied to.
    """
    ordered = sorted(quotas, key=quota_name)
    for claims in (
        lambda q: _claims_namespace_by_name(q, namespace),
        lambda q: _claims_namespace_by_selector(q, namespace_labels),
        lambda q: _claims_groups(q, groups),
    ):
        for quota in ordered:
            if claims(quota):
                tenant = tenant_of_quota(quota)
                return tenant, [q for q in ordered if tenant_of_quota(q) == tenant]
    label = namespace_labels.get(TENANT_LABEL)
    if label and not any(tenant_of_quota(q) == label for q in ordered):
        return label, []
    return namespace, []


def charge_belongs_to(charge: PodCharge, tenant: str, tenant_quotas: Iterable[Mapping[str, Any]]) -> bool:
    """A pod counts for the tenant recorded on it at admission, else for the tenant that claims its namespace.

    The recorded tenant is believed only where admission could have written it: the tenant claims the pod's
    namespace, or names groups (whose members' pods are its own wherever they are). A pod KGWE never admitted
    (an excluded namespace, a mirror pod) could carry any `kgwe.io/tenant` and fill another tenant's quota."""
    quotas = list(tenant_quotas)
    claims_namespace = any(
        _claims_namespace_by_name(q, charge.namespace) or _claims_namespace_by_selector(q, charge.namespace_labels)
        for q in quotas
    )
    if charge.tenant:
        return charge.tenant == tenant and (claims_namespace or any((q.get("spec") or {}).get("groups")
                                                                     for q in quotas))
    return claims_namespace


def format_gpus(value: Decimal) -> str:
    if value == value.to_integral_value():
        return str(int(value))
    return f"{value.quantize(Decimal('0.01')).normalize():f}"


GIB = Decimal(1024**3)


def format_memory(value: Decimal) -> str:
    return f"{format_gpus(value / GIB)}Gi"
