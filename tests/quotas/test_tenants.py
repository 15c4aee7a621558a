"""Which tenant a pod is charged to, which TenantQuotas apply, and which pods count for whom."""

from __future__ import annotations

from typing import Any

from quota_fixtures import charge

from policies.quota.model import (
    LimitKey,
    charge_belongs_to,
    quota_limits,
    resolve_tenant,
)


def names(quotas: list[dict[str, Any]]) -> list[str]:
    return [q["metadata"]["name"] for q in quotas]


def test_namespace_listed_by_name_picks_its_tenant(example_quotas: list[dict[str, Any]]) -> None:
    tenant, applying = resolve_tenant("team-a", {"kgwe.io/tenant": "team-a"}, ["developers"], example_quotas)
    assert tenant == "team-a"
    assert names(applying) == ["team-a"]


def test_group_based_tenant_applies_in_a_namespace_no_quota_claims(example_quotas: list[dict[str, Any]]) -> None:
    tenant, applying = resolve_tenant("default", {}, ["system:authenticated", "ml-researchers"], example_quotas)
    assert tenant == "ml-research"
    assert names(applying) == ["ml-research"]


def test_namespace_claim_wins_over_group_claim(example_quotas: list[dict[str, Any]]) -> None:
    # An ml-researcher creating a pod in team-a's namespace spends team-a's GPUs.
    tenant, applying = resolve_tenant("team-a", {}, ["ml-researchers"], example_quotas)
    assert tenant == "team-a"
    assert names(applying) == ["team-a"]


def test_namespace_selector_claims_labelled_namespaces() -> None:
    quotas = [
        {
            "metadata": {"name": "research-wide"},
            "spec": {
                "tenant": "research",
                "namespaceSelector": {"matchExpressions": [{"key": "org", "operator": "In", "values": ["research"]}]},
                "limits": [{"acceleratorType": "nvidia-h100-80gb", "gpus": 4}],
            },
        },
        {
            "metadata": {"name": "research-extra"},
            "spec": {"tenant": "research", "groups": ["researchers"], "limits": [{"profile": "nvl72", "gpus": 72}]},
        },
    ]
    tenant, applying = resolve_tenant("lab-1", {"org": "research"}, [], quotas)
    assert tenant == "research"
    # Every TenantQuota of the tenant applies, however the tenant was found.
    assert names(applying) == ["research-extra", "research-wide"]
    assert resolve_tenant("lab-2", {"org": "sales"}, [], quotas) == ("lab-2", [])


def test_without_a_matching_quota_the_tenant_comes_from_the_namespace(example_quotas: list[dict[str, Any]]) -> None:
    assert resolve_tenant("inference", {"kgwe.io/tenant": "serving"}, [], example_quotas) == ("serving", [])
    assert resolve_tenant("default", {}, ["developers"], example_quotas) == ("default", [])


def test_a_namespace_label_cannot_join_a_tenant_that_has_quotas(example_quotas: list[dict[str, Any]]) -> None:
    # team-a's TenantQuota lists its namespaces: a namespace labelled into team-a (by whoever may label
    # namespaces) would otherwise fill team-a's quota with pods that no limit of team-a's applied to.
    assert resolve_tenant("sandbox", {"kgwe.io/tenant": "team-a"}, [], example_quotas) == ("sandbox", [])


def test_limits_parse_types_profiles_and_memory(example_quotas: list[dict[str, Any]]) -> None:
    ml = next(q for q in example_quotas if q["metadata"]["name"] == "ml-research")
    limits = {limit.key: limit for limit in quota_limits(ml)}
    assert limits[LimitKey("acceleratorType", "nvidia-h100-80gb")].gpus == 16
    profile = limits[LimitKey("profile", "premium-h100")]
    assert profile.gpus == 12
    assert profile.gpu_memory == 960 * 1024**3


def test_a_pod_counts_for_the_tenant_recorded_on_it(example_quotas: list[dict[str, Any]]) -> None:
    ml = [q for q in example_quotas if q["metadata"]["name"] == "ml-research"]
    by_group = charge("default", "p", 1, "nvidia-h100-80gb", tenant="ml-research")
    other_tenant = charge("ml-research", "q", 1, "nvidia-h100-80gb", tenant="team-a")
    legacy = charge("ml-research", "r", 1, "nvidia-h100-80gb")
    stranger = charge("team-a", "s", 1, "nvidia-h100-80gb")
    assert charge_belongs_to(by_group, "ml-research", ml)
    assert not charge_belongs_to(other_tenant, "ml-research", ml)
    assert charge_belongs_to(legacy, "ml-research", ml)
    assert not charge_belongs_to(stranger, "ml-research", ml)
