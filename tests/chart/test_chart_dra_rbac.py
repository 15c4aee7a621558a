"""The webhook's DRA permissions (webhook-dra-rbac.yaml), rendered by the real Helm engine."""

from __future__ import annotations

from chart_support import NAMESPACE, Rendered

WEBHOOK = "kgwe-webhook"


def _granted(rendered: Rendered, group: str) -> dict[str, set[str]]:
    """resource -> verbs the webhook's service account has cluster-wide in `group`."""
    out: dict[str, set[str]] = {}
    for binding in rendered.of_kind("ClusterRoleBinding"):
        if not any(s.get("kind") == "ServiceAccount" and s["name"] == WEBHOOK and s["namespace"] == NAMESPACE
                   for s in binding["subjects"]):
            continue
        for rule in rendered.one("ClusterRole", binding["roleRef"]["name"])["rules"]:
            if group in rule["apiGroups"]:
                assert "resourceNames" not in rule
                for resource in rule["resources"]:
                    out.setdefault(resource, set()).update(rule["verbs"])
    return out


def test_webhook_reads_dra_facts_and_creates_and_collects_templates(default: Rendered) -> None:
    assert _granted(default, "resource.k8s.io") == {
        "resourceslices": {"get", "list", "watch"},
        "deviceclasses": {"get", "list", "watch"},
        "resourceclaims": {"get", "list", "watch"},
        # list and delete: the unused ones are removed (webhook/dra/garbage.py); never update or watch.
        "resourceclaimtemplates": {"create", "get", "list", "delete"},
    }


def test_webhook_creates_and_collects_compute_domains(default: Rendered) -> None:
    assert _granted(default, "resource.nvidia.com") == {"computedomains": {"create", "list", "delete"}}
