"""The chart's grants for gangs (webhook-rbac-gangs.yaml): the GangLedger, the pod patch, and a released gang's
Workload and PodGroup where the Workload API is served, nothing more."""

from __future__ import annotations

from typing import Any

from chart_support import Rendered

ACCOUNT = "kgwe-webhook"


def _gang_rules(rendered: Rendered) -> list[dict[str, Any]]:
    binding = rendered.one("ClusterRoleBinding", "kgwe-webhook-gangs")
    assert [(s["kind"], s["name"]) for s in binding["subjects"]] == [("ServiceAccount", ACCOUNT)]
    return list(rendered.one("ClusterRole", binding["roleRef"]["name"])["rules"])


def _allows(rules: list[dict[str, Any]], verb: str, group: str, resource: str, name: str | None = None) -> bool:
    return any(
        group in r["apiGroups"] and resource in r["resources"] and verb in r["verbs"]
        and ("resourceNames" not in r or name in r["resourceNames"])
        for r in rules
    )


def test_the_gang_role_grants_the_ledger_the_pin_the_gate_and_events(default: Rendered) -> None:
    rules = _gang_rules(default)
    assert _allows(rules, "create", "kgwe.io", "gangledgers")
    assert _allows(rules, "get", "kgwe.io", "gangledgers", "kgwe-gangs")
    assert _allows(rules, "update", "kgwe.io", "gangledgers", "kgwe-gangs")
    assert _allows(rules, "patch", "", "pods")
    assert _allows(rules, "create", "", "events")


def test_the_gang_role_grants_what_native_gang_scheduling_does_with_workloads_and_pod_groups(default: Rendered) -> None:
    from webhook.controllers.permissions import NATIVE_GANG_NEEDS

    rules = _gang_rules(default)
    for need in NATIVE_GANG_NEEDS:  # what /readyz asks for while the Workload API is served
        assert _allows(rules, need.verb, need.group, need.resource), need.described
    assert not _allows(rules, "list", "scheduling.k8s.io", "podgroups")
    assert not _allows(rules, "update", "scheduling.k8s.io", "workloads")


def test_the_gang_role_grants_nothing_more(default: Rendered) -> None:
    rules = _gang_rules(default)
    assert not _allows(rules, "update", "kgwe.io", "gangledgers", "another-ledger")
    assert not _allows(rules, "delete", "kgwe.io", "gangledgers", "kgwe-gangs")
    assert not _allows(rules, "list", "kgwe.io", "gangledgers")
    assert not _allows(rules, "update", "", "pods")
    assert not _allows(rules, "delete", "", "pods")
    assert not _allows(rules, "create", "", "pods")
    assert {group for r in rules for group in r["apiGroups"]} == {"", "kgwe.io", "scheduling.k8s.io"}
