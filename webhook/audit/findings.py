"""What the background audit found: one violation of a policy, a quota or a placement rule."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Literal

Category = Literal["policy", "quota", "placement"]
Severity = Literal["critical", "high", "medium", "low", "info"]
Result = Literal["fail", "warn", "error"]
CATEGORIES: tuple[Category, ...] = ("policy", "quota", "placement")
# Whom the audit asks as when it sends pods and workloads through the webhooks.
AUDIT_USER = "system:serviceaccount:kgwe:kgwe-audit"


@dataclass(frozen=True, order=True)
class Finding:
    """One violation. `namespace` and `pod` are empty for cluster-wide findings (quotas are per tenant)."""

    category: Category
    namespace: str
    pod: str
    policy: str
    rule: str
    severity: Severity
    message: str
    result: Result = "fail"
    uid: str | None = None
    tenant: str | None = None
    quota: str | None = None  # the TenantQuota of a quota finding
    # A workload's finding (webhook/audit/workloads.py): `pod` holds the workload's name, these its type.
    kind: str | None = None
    api_version: str | None = None

    @property
    def cluster_wide(self) -> bool:
        return not self.namespace

    def as_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None}
