"""Which GPU pods the quota gate holds: those of a tenant with a TenantQuota, unless Kueue governs them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from policies.vocabulary import keys
from policies.vocabulary.objects import PodView, pod_view
from policies.vocabulary.selectors import parse_selector
from webhook.config import Config

QUOTA_GATE = keys.QUOTA_GATE
QUOTA_CONDITION = keys.QUOTA_CONDITION


def is_quota_gated(pod: PodView | Mapping[str, Any]) -> bool:
    """The pod still carries the quota gate: it holds no quota and no GPU yet."""
    return QUOTA_GATE in pod_view(pod).scheduling_gates


def deferred_to_kueue(config: Config, namespace_labels: Mapping[str, str]) -> bool:
    """`quotas.deferTo: kueue` covers this namespace: Kueue's ClusterQueues, not KGWE's gate, admit its pods."""
    quotas = config.quotas
    if quotas.defer_to != "kueue":
        return False
    try:
        selector = parse_selector(quotas.defer_namespace_selector)
    except ValueError:
        return False  # an unreadable selector defers nothing: KGWE's quota still holds
    return selector is None or selector.matches(namespace_labels)


def gets_quota_gate(config: Config, has_quota: bool, namespace_labels: Mapping[str, str]) -> bool:
    """A GPU pod of a tenant with a TenantQuota is gated, unless its namespace is deferred to Kueue."""
    return has_quota and not deferred_to_kueue(config, namespace_labels)
