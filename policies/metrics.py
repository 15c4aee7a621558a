"""Prometheus metrics of the policy layer, on prometheus_client's default registry (served at /metrics).

Defined once here so the webhook, the policy engines, quotas and RBAC count into the same series.
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

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


# The policy engines and the policy set.
POLICY_VIOLATIONS = Counter(
    "kgwe_policy_violations_total", "Policy violations found at admission, by policy and enforcement action",
    ["policy", "action"],
)
POLICY_LOAD_ERRORS = Counter(
    "kgwe_policy_load_errors_total", "Policies refused at load because they did not compile", ["policy"],
)
POLICY_ENGINE_ERRORS = Counter(
    "kgwe_policy_engine_errors_total", "Policy engine errors and time-outs during evaluation", ["engine"],
)
POLICY_REGO_VM_FALLBACKS = Counter(
    "kgwe_policy_rego_vm_fallbacks_total",
    "Rego queries of a set served by regorus' compiled VM that its interpreter answered instead: input (a shape "
    "the API server never sends), cluster (a MIG profile name the library cannot read), undefined (the VM's "
    "answer held an undefined value)",
    ["reason"],
)
POLICY_EVALUATION_SECONDS = Histogram(
    "kgwe_policy_evaluation_seconds", "Time to evaluate the policy set for one request",
    ["operation"],
    buckets=(0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5),
)
POLICY_ENGINE_UP = Gauge(
    "kgwe_policy_engine_up",
    "1 while the Rego engine serves the loaded policy set, 0 while it is unreachable (its Rego policies then "
    "follow policies.failureMode)",
    ["engine"],
)


def record_refusal(reason: str) -> None:
    ADMISSION_REFUSALS.labels(reason=reason).inc()
