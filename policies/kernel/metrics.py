"""Prometheus metrics of the policy layer, on prometheus_client's default registry (served at /metrics).

Defined once here so the webhook, the policy engines, quotas and RBAC count into the same series. They are
made by `metric_kinds` (prometheus_client's own objects, or ones that do nothing in a one-shot command).
"""

from __future__ import annotations

import math
import os
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING

from policies.kernel.metric_kinds import KeptChildren, counter, gauge, histogram

if TYPE_CHECKING:
    from prometheus_client import Gauge

ADMISSION_REFUSALS = counter(
    "kgwe_admission_refusals",
    "Pods the validating webhook refused, by reason (quota, rbac, placement, policy, ...).",
    ["reason"],
)

QUOTA_USED = gauge(
    "kgwe_quota_used",
    "GPU-equivalents in use by a tenant's unfinished pods; type is an accelerator type id or profile:<name>.",
    ["tenant", "type"],
)

QUOTA_LIMIT = gauge(
    "kgwe_quota_limit",
    "A tenant's tightest GPU limit from its TenantQuota objects; type is an accelerator type id or profile:<name>.",
    ["tenant", "type"],
)


# The policy engines and the policy set.
POLICY_VIOLATIONS = counter(
    "kgwe_policy_violations_total", "Policy violations found at admission, by policy and enforcement action",
    ["policy", "action"],
)
POLICY_LOAD_ERRORS = counter(
    "kgwe_policy_load_errors_total", "Policies refused at load because they did not compile", ["policy"],
)
POLICY_ENGINE_ERRORS = counter(
    "kgwe_policy_engine_errors_total", "Policy engine errors and time-outs during evaluation", ["engine"],
)
POLICY_REGO_VM_FALLBACKS = counter(
    "kgwe_policy_rego_vm_fallbacks_total",
    "Rego queries of a set served by regorus' compiled VM that its interpreter answered instead: input (a shape "
    "the API server never sends), cluster (a MIG profile name the library cannot read), undefined (the VM's "
    "answer held an undefined value)",
    ["reason"],
)
POLICY_EVALUATION_SECONDS = histogram(
    "kgwe_policy_evaluation_seconds", "Time to evaluate the policy set for one request",
    ["operation"],
    buckets=(0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5),
)
POLICY_ENGINE_UP = gauge(
    "kgwe_policy_engine_up",
    "1 while the Rego engine serves the loaded policy set, 0 while it is unreachable (its Rego policies then "
    "follow policies.failureMode)",
    ["engine"],
)


_REFUSALS = KeptChildren(ADMISSION_REFUSALS)


def record_refusal(reason: str) -> None:
    _REFUSALS(reason).inc()


# Label sets each labelled gauge was given through `replace_series` or `add_series` in this process.
_SERIES: dict[int, set[tuple[str, ...]]] = {}
_SERIES_LOCK = threading.Lock()


def multiprocess_mode() -> bool:
    """Whether prometheus-client keeps values in per-process files (`kgwe serve --workers N`)."""
    return "PROMETHEUS_MULTIPROC_DIR" in os.environ or "prometheus_multiproc_dir" in os.environ


def add_series(gauge: Gauge, values: Mapping[tuple[str, ...], float]) -> None:
    """Set these series of the gauge (label values -> value), leaving its others as they are."""
    with _SERIES_LOCK:
        for labels, value in values.items():
            gauge.labels(*labels).set(value)
        _SERIES.setdefault(id(gauge), set()).update(values)


def replace_series(gauge: Gauge, values: Mapping[tuple[str, ...], float], *, stale: float = math.nan) -> None:
    """Make `values` (label values -> value) the gauge's series: a series set before and not now goes.

    In prometheus-client's multiprocess mode a series cannot be removed (the library only warns, and the
    value stays in its file): there a series that went is set to `stale` instead: NaN (no value) by
    default, 0 where absence means none (a count of waiting gangs).
    """
    with _SERIES_LOCK:
        for labels in _SERIES.get(id(gauge), set()) - values.keys():
            if multiprocess_mode():
                gauge.labels(*labels).set(stale)
            else:
                gauge.remove(*labels)
        for labels, value in values.items():
            gauge.labels(*labels).set(value)
        _SERIES[id(gauge)] = set(values)
