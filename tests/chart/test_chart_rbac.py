"""Least privilege: what each service account may do, and the agent's node-scope admission policy."""

from __future__ import annotations

import copy
from typing import Any

import celpy
import pytest
from chart_support import NAMESPACE, Cel, Rendered, render

AGENT_USER = f"system:serviceaccount:{NAMESPACE}:kgwe-agent"


def _rules(rendered: Rendered, account: str) -> list[tuple[dict[str, Any], str | None]]:
    """Every rule granted to a service account, with the namespace it applies in (None: cluster-wide)."""
    granted: list[tuple[dict[str, Any], str | None]] = []
    for binding_kind, role_kind in (("ClusterRoleBinding", "ClusterRole"), ("RoleBinding", "Role")):
        for binding in rendered.of_kind(binding_kind):
            if not any(s.get("kind") == "ServiceAccount" and s["name"] == account for s in binding["subjects"]):
                continue
            role = rendered.one(role_kind, binding["roleRef"]["name"])
            scope = binding["metadata"].get("namespace")
            granted.extend((rule, scope) for rule in role["rules"])
    return granted


def _allows(rendered: Rendered, account: str, verb: str, group: str, resource: str, name: str | None = None,
            namespace: str | None = None) -> bool:
    for rule, scope in _rules(rendered, account):
        if scope is not None and scope != namespace:
            continue
        if group not in rule["apiGroups"] or resource not in rule["resources"] or verb not in rule["verbs"]:
            continue
        if "resourceNames" in rule and name not in rule["resourceNames"]:
            continue
        return True
    return False


def test_agent_may_only_get_and_patch_nodes(default: Rendered) -> None:
    rules = _rules(default, "kgwe-agent")
    assert [(r["apiGroups"], r["resources"], r["verbs"]) for r, _ in rules] == [([""], ["nodes"], ["get", "patch"])]


@pytest.mark.parametrize(("verb", "group", "resource", "name", "namespace"), [
    ("watch", "", "nodes", None, None),
    ("list", "", "pods", None, None),
    ("watch", "", "namespaces", None, None),
    ("watch", "kgwe.io", "hardwareprofiles", None, None),
    ("list", "kgwe.io", "tenantquotas", None, None),
    ("watch", "kgwe.io", "gpupolicies", None, None),
    ("watch", "rbac.authorization.k8s.io", "rolebindings", None, None),
    ("list", "rbac.authorization.k8s.io", "clusterroles", None, None),
    ("create", "authorization.k8s.io", "subjectaccessreviews", None, None),
    ("create", "authentication.k8s.io", "tokenreviews", None, None),
    ("update", "kgwe.io", "tenantquotas/status", None, None),
    ("patch", "kgwe.io", "hardwareprofiles/status", None, None),
    ("update", "kgwe.io", "gpupolicies/status", None, None),
    ("patch", "", "pods", None, None),
    ("create", "wgpolicyk8s.io", "policyreports", None, None),
    ("create", "openreports.io", "reports", None, None),
    ("update", "openreports.io", "clusterreports", None, None),
    ("get", "openreports.io", "reports", None, None),
    ("update", "wgpolicyk8s.io", "clusterpolicyreports", None, None),
    ("patch", "admissionregistration.k8s.io", "mutatingwebhookconfigurations", "kgwe", None),
    ("get", "admissionregistration.k8s.io", "validatingwebhookconfigurations", "kgwe", None),
    ("update", "coordination.k8s.io", "leases", "kgwe-leader", NAMESPACE),
    ("create", "", "events", None, None),
])
def test_webhook_has_what_it_needs(default: Rendered, verb: str, group: str, resource: str, name: str | None,
                                   namespace: str | None) -> None:
    assert _allows(default, "kgwe-webhook", verb, group, resource, name, namespace)


@pytest.mark.parametrize(("verb", "group", "resource", "name", "namespace"), [
    ("create", "", "pods", None, None),
    ("delete", "", "pods", None, None),
    ("update", "", "pods", None, None),
    ("patch", "", "nodes", None, None),
    ("update", "kgwe.io", "tenantquotas", None, None),
    ("delete", "kgwe.io", "gpupolicies", None, None),
    ("get", "", "secrets", "other-secret", NAMESPACE),
    ("get", "", "secrets", "kgwe-tls", "team-a"),
    # The pair is mounted; the CA key is readable by the certs runners alone.
    ("get", "", "secrets", "kgwe-tls", NAMESPACE),
    ("update", "", "secrets", "kgwe-tls", NAMESPACE),
    ("get", "", "secrets", "kgwe-ca", NAMESPACE),
    ("list", "", "secrets", None, NAMESPACE),
    ("patch", "admissionregistration.k8s.io", "mutatingwebhookconfigurations", "someone-else", None),
    ("update", "coordination.k8s.io", "leases", "kgwe-leader", "kube-system"),
    ("escalate", "rbac.authorization.k8s.io", "clusterroles", None, None),
])
def test_webhook_has_nothing_more(default: Rendered, verb: str, group: str, resource: str, name: str | None,
                                  namespace: str | None) -> None:
    assert not _allows(default, "kgwe-webhook", verb, group, resource, name, namespace)


@pytest.mark.parametrize("account", ["kgwe-certs", "kgwe-certs-hook"])
def test_certs_runners_touch_only_the_secret_and_the_configurations(default: Rendered, account: str) -> None:
    assert _allows(default, account, "create", "", "secrets", None, NAMESPACE)
    assert _allows(default, account, "update", "", "secrets", "kgwe-tls", NAMESPACE)
    assert _allows(default, account, "get", "", "secrets", "kgwe-ca", NAMESPACE)
    assert _allows(default, account, "patch", "admissionregistration.k8s.io", "validatingwebhookconfigurations", "kgwe")
    assert not _allows(default, account, "get", "", "secrets", "other", NAMESPACE)
    assert not _allows(default, account, "create", "", "secrets", None, "team-a")
    assert not _allows(default, account, "patch", "admissionregistration.k8s.io", "mutatingwebhookconfigurations",
                       "other")


def test_authenticated_users_may_use_every_profile_and_type(rendered_scenarios: dict[str, Rendered]) -> None:
    rendered = rendered_scenarios["default"]
    role = rendered.one("ClusterRole", "kgwe-use-all-profiles")
    assert role["rules"] == [{"apiGroups": ["kgwe.io"], "resources": ["hardwareprofiles", "acceleratortypes"],
                              "verbs": ["use"]}]
    binding = rendered.one("ClusterRoleBinding", "kgwe-use-all-profiles")
    assert binding["subjects"] == [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group",
                                    "name": "system:authenticated"}]
    assert "kgwe-use-all-profiles" not in rendered_scenarios["locked-down"].names("ClusterRole")


# The agent's node-scope ValidatingAdmissionPolicy, evaluated with cel-python.

NODE: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Node",
    "metadata": {
        "name": "gpu-node-1",
        "labels": {"kubernetes.io/hostname": "gpu-node-1", "nvidia.com/gpu.present": "true",
                   "kgwe.io/accelerator-type": "nvidia-h100-80gb"},
        "annotations": {"node.alpha.kubernetes.io/ttl": "0", "kgwe.io/topology": '{"version": 1}'},
    },
    "spec": {"podCIDR": "10.0.1.0/24", "taints": [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}]},
}


def _agent_request(node_name: str, target: str, user: str = AGENT_USER, sub_resource: str = "") -> dict[str, Any]:
    return {
        "operation": "UPDATE", "name": target, "subResource": sub_resource,
        "userInfo": {"username": user, "extra": {"authentication.kubernetes.io/node-name": [node_name]}},
    }


def _policy_verdict(cel: Cel, rendered: Rendered, request: dict[str, Any], new: dict[str, Any],
                    old: dict[str, Any], policy_name: str = "kgwe-agent-node-scope") -> str:
    """"skipped" (policy does not apply), "allowed" or the message of the first failing validation."""
    policy = rendered.one("ValidatingAdmissionPolicy", policy_name)["spec"]
    activation: dict[str, Any] = {"object": new, "oldObject": old, "request": request}
    if not all(cel.check(c["expression"], **activation) for c in policy["matchConditions"]):
        return "skipped"
    variables: dict[str, Any] = {}
    for variable in policy.get("variables", []):
        value = cel.evaluate(variable["expression"], **activation, variables=variables)
        variables[variable["name"]] = _plain(value)
    for validation in policy["validations"]:
        if not cel.check(validation["expression"], **activation, variables=variables):
            return str(validation.get("message") or validation["messageExpression"])
    return "allowed"


def _plain(value: Any) -> Any:
    if isinstance(value, celpy.celtypes.BoolType):
        return bool(value)
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return str(value)


def _changed(node: dict[str, Any], **metadata: dict[str, str | None]) -> dict[str, Any]:
    changed = copy.deepcopy(node)
    for field, updates in metadata.items():
        for key, value in updates.items():
            if value is None:
                changed["metadata"][field].pop(key)
            else:
                changed["metadata"][field][key] = value
    return changed


def test_agent_may_publish_kgwe_keys_on_its_own_node(default: Rendered, cel: Cel) -> None:
    request = _agent_request("gpu-node-1", "gpu-node-1")
    published = _changed(NODE, labels={"kgwe.io/nvlink-domain-size": "8", "kgwe.io/accelerator-type": "mixed"},
                         annotations={"kgwe.io/topology": '{"version": 2}'})
    assert _policy_verdict(cel, default, request, published, NODE) == "allowed"
    withdrawn = _changed(NODE, labels={"kgwe.io/accelerator-type": None})
    assert _policy_verdict(cel, default, request, withdrawn, NODE) == "allowed"


def test_agent_may_not_touch_another_node(default: Rendered, cel: Cel) -> None:
    other = _changed(NODE, labels={"kgwe.io/nvlink-domain-size": "8"})
    verdict = _policy_verdict(cel, default, _agent_request("gpu-node-2", "gpu-node-1"), other, NODE)
    assert verdict.startswith("'the KGWE agent on node ' + variables.nodeName")


def test_agent_without_a_node_bound_token_is_refused(default: Rendered, cel: Cel) -> None:
    request = _agent_request("gpu-node-1", "gpu-node-1")
    request["userInfo"]["extra"] = {}
    published = _changed(NODE, labels={"kgwe.io/nvlink-domain-size": "8"})
    assert _policy_verdict(cel, default, request, published, NODE) != "allowed"


@pytest.mark.parametrize(("field", "key", "value"), [
    ("labels", "nvidia.com/gpu.present", "false"),
    ("labels", "node-role.kubernetes.io/control-plane", ""),
    ("labels", "kubernetes.io/hostname", None),
    ("annotations", "node.alpha.kubernetes.io/ttl", "30"),
    ("annotations", "kgwe-io/topology", "{}"),
])
def test_agent_may_change_only_kgwe_keys(default: Rendered, cel: Cel, field: str, key: str, value: str | None) -> None:
    tampered = _changed(NODE, **{field: {key: value}})
    verdict = _policy_verdict(cel, default, _agent_request("gpu-node-1", "gpu-node-1"), tampered, NODE)
    assert verdict == f"the KGWE agent may only change kgwe.io/ {field}"


def test_agent_may_not_taint_or_cordon(default: Rendered, cel: Cel) -> None:
    cordoned = copy.deepcopy(NODE)
    cordoned["spec"]["unschedulable"] = True
    verdict = _policy_verdict(cel, default, _agent_request("gpu-node-1", "gpu-node-1"), cordoned, NODE)
    assert verdict.startswith("the KGWE agent may not change a node's spec")


def test_agent_may_not_write_node_status(default: Rendered, cel: Cel) -> None:
    request = _agent_request("gpu-node-1", "gpu-node-1", sub_resource="status")
    assert _policy_verdict(cel, default, request, NODE, NODE) == "the KGWE agent may not change node status"


def test_policy_leaves_everyone_else_alone(default: Rendered, cel: Cel) -> None:
    kubelet = _agent_request("gpu-node-1", "gpu-node-2", user="system:node:gpu-node-2")
    relabelled = _changed(NODE, labels={"nvidia.com/gpu.present": "false"})
    assert _policy_verdict(cel, default, kubelet, relabelled, NODE) == "skipped"


def test_policy_is_bound_to_deny(default: Rendered) -> None:
    policy = default.one("ValidatingAdmissionPolicy", "kgwe-agent-node-scope")
    binding = default.one("ValidatingAdmissionPolicyBinding", "kgwe-agent-node-scope")
    assert binding["spec"]["policyName"] == policy["metadata"]["name"]
    assert binding["spec"]["validationActions"] == ["Deny"]
    assert policy["spec"]["failurePolicy"] == "Fail"
    assert AGENT_USER in policy["spec"]["matchConditions"][0]["expression"]


WEBHOOK_USER = f"system:serviceaccount:{NAMESPACE}:kgwe-webhook"


@pytest.mark.parametrize(
    ("user", "name", "expected"),
    [
        ("alice", "kgwe-0123456789abcdef0123", "refused"),  # a squatter under KGWE's content-hashed name
        (WEBHOOK_USER, "kgwe-0123456789abcdef0123", "skipped"),
        ("alice", "my-gpus", "skipped"),  # users' own templates are theirs to write
        # A ComputeDomain's IMEX channel template: NVIDIA's ComputeDomain controller writes it.
        ("system:serviceaccount:nvidia-dra-driver-gpu:compute-domain-controller", "kgwe-cd-0123456789ab-channel",
         "skipped"),
    ],
)
def test_only_the_webhook_writes_kgwe_claim_templates(default: Rendered, cel: Cel, user: str, name: str,
                                                      expected: str) -> None:
    template = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
                "metadata": {"name": name, "namespace": "team-a"},
                "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
                    "deviceClassName": "gpu.nvidia.com", "allocationMode": "ExactCount", "count": 8}}]}}}}
    request = {"operation": "CREATE", "name": name, "subResource": "", "userInfo": {"username": user}}
    verdict = _policy_verdict(cel, default, request, template, {}, "kgwe-webhook-claim-template-scope")
    assert ("refused" if verdict.startswith("ResourceClaimTemplates named kgwe-") else verdict) == expected
    binding = default.one("ValidatingAdmissionPolicyBinding", "kgwe-webhook-claim-template-scope")
    assert binding["spec"]["validationActions"] == ["Deny"]
    off = render({"webhook": {"claimTemplateScopePolicy": {"enabled": False}}})
    assert "kgwe-webhook-claim-template-scope" not in off.names("ValidatingAdmissionPolicy")


def test_a_metrics_reader_role_is_shipped_and_bound_only_to_who_is_named(default: Rendered) -> None:
    """SPEC 13: /metrics needs `get` on the URL /metrics; the chart ships the role, bound to nobody by default
    (per-pod costs are in the metrics)."""
    role = default.one("ClusterRole", "kgwe-metrics-reader")
    assert role["rules"] == [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]
    assert "kgwe-metrics-reader" not in default.names("ClusterRoleBinding")
    bound = render({"metrics": {"readers": [
        {"kind": "ServiceAccount", "name": "prometheus-k8s", "namespace": "monitoring"},
        {"kind": "Group", "name": "sre"},
    ]}})
    binding = bound.one("ClusterRoleBinding", "kgwe-metrics-reader")
    assert binding["roleRef"]["name"] == "kgwe-metrics-reader"
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "prometheus-k8s", "namespace": "monitoring"},
        {"kind": "Group", "name": "sre", "apiGroup": "rbac.authorization.k8s.io"},
    ]


def test_the_service_monitor_scrapes_with_a_token(default: Rendered) -> None:
    monitored = render({"metrics": {"serviceMonitor": {"enabled": True}}})
    endpoint = monitored.one("ServiceMonitor")["spec"]["endpoints"][0]
    assert endpoint["bearerTokenFile"] == "/var/run/secrets/kubernetes.io/serviceaccount/token"
