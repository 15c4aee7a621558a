"""The chart's quota-gate ValidatingAdmissionPolicy and binding (templates/pod-quota-gate.yaml), as the real Helm
engine renders them: valid admissionregistration.k8s.io/v1 objects from the oldest Kubernetes the chart supports to
the newest, TenantQuotas as params, and the lists it copies from KGWE's code kept equal to them. What the policy
decides is tested in tests/vap/test_quota_gate_policy.py."""

from __future__ import annotations

import json
from typing import Any

import kubernetes_validate
import pytest
import yaml
from chart_support import NAMESPACE, Rendered, render

from policies.vocabulary.resources import GPU_RESOURCE_PREFIXES
from webhook.wing_config import DEFAULT_CONTROLLER_IDENTITIES

POLICY = "kgwe-pod-quota-gate"
KUEUE = {"config": {"quotas": {"deferTo": "kueue", "deferNamespaceSelector": {"matchLabels": {"queue": "kueue"}}}}}


def compact(value: Any) -> str:
    """JSON as Helm's toJson writes it, which CEL reads as a literal."""
    return json.dumps(value, separators=(",", ":"))


def objects(rendered: Rendered) -> tuple[dict[str, Any], dict[str, Any]]:
    return (rendered.one("ValidatingAdmissionPolicy", POLICY), rendered.one("ValidatingAdmissionPolicyBinding", POLICY))


def conditions(policy: dict[str, Any]) -> dict[str, str]:
    return {c["name"]: c["expression"] for c in policy["spec"]["matchConditions"]}


def variables(policy: dict[str, Any]) -> dict[str, str]:
    return {v["name"]: v["expression"] for v in policy["spec"]["variables"]}


@pytest.mark.parametrize("version", ["1.30", "1.36", kubernetes_validate.latest_version()])
@pytest.mark.parametrize("values", [{}, KUEUE], ids=["default", "kueue"])
def test_the_policy_and_binding_are_valid_kubernetes(values: dict[str, Any], version: str) -> None:
    for obj in objects(render(values)):
        kubernetes_validate.validate(obj, version, strict=True)


def test_tenant_quotas_are_the_params_every_one_of_them(default: Rendered,
                                                        chart_crds: dict[str, dict[str, Any]]) -> None:
    policy, binding = objects(default)
    crd = chart_crds["TenantQuota"]["spec"]
    (served,) = [v["name"] for v in crd["versions"] if v["served"] and v["storage"]]
    assert policy["spec"]["paramKind"] == {"apiVersion": f"{crd['group']}/{served}", "kind": "TenantQuota"}
    # Cluster-scoped params: a namespace in paramRef would be a configuration error.
    assert crd["scope"] == "Cluster"
    assert binding["spec"] == {"policyName": POLICY, "validationActions": ["Deny"],
                               "paramRef": {"selector": {}, "parameterNotFoundAction": "Allow"}}
    # The API server's own errors (the kind not served, params not read yet) must not refuse a pod KGWE admits.
    assert policy["spec"]["failurePolicy"] == "Ignore"
    assert policy["spec"]["matchConstraints"]["resourceRules"] == [
        {"apiGroups": [""], "apiVersions": ["*"], "operations": ["CREATE"], "resources": ["pods"]}]


def test_it_is_sent_what_the_pod_webhooks_are_sent(default: Rendered) -> None:
    policy, _ = objects(default)
    webhook = next(w for w in default.one("MutatingWebhookConfiguration")["webhooks"] if w["name"] == "mutate.kgwe.io")
    assert policy["spec"]["matchConstraints"]["namespaceSelector"] == webhook["namespaceSelector"]
    assert {c["name"]: c["expression"] for c in webhook["matchConditions"]}.items() <= conditions(policy).items()


def test_the_lists_it_copies_from_kgwe_are_kgwes(default: Rendered) -> None:
    policy, _ = objects(default)
    asks = conditions(policy)["asks-for-gpus"]
    assert all(f"r.startsWith({json.dumps(prefix)})" in asks for prefix in GPU_RESOURCE_PREFIXES)
    assert asks.count("r.startsWith(") == 2 * len(GPU_RESOURCE_PREFIXES)
    signed = variables(policy)["signedForAnother"]
    assert signed.startswith(f"request.userInfo.username in {compact(list(DEFAULT_CONTROLLER_IDENTITIES))} ")
    excluded = yaml.safe_load(default.one("ConfigMap")["data"]["config.yaml"])["excludedNamespaces"]
    assert excluded == ["kube-system", NAMESPACE]
    assert conditions(policy)["not-excluded-by-kgwe"] == f"!(request.namespace in {compact(excluded)})"


@pytest.mark.parametrize(("workloads", "expected"), [
    ({"controllerIdentities": ["system:serviceaccount:ops:runner"]}, ["system:serviceaccount:ops:runner"]),
    ({"controllerIdentities": []}, []),  # no controller is trusted: the requester's groups always count
])
def test_the_configured_controller_identities_are_used(workloads: dict[str, Any], expected: list[str]) -> None:
    policy, _ = objects(render({"config": {"workloads": workloads}}))
    assert variables(policy)["signedForAnother"].startswith(f"request.userInfo.username in {compact(expected)} ")


def test_kueue_namespaces_are_left_to_kueue(default: Rendered) -> None:
    policy, _ = objects(render(KUEUE))
    assert variables(policy)["deferredToKueue"] == '("queue" in variables.namespaceLabels && ' \
                                                   'variables.namespaceLabels["queue"] == "kueue")'
    assert policy["spec"]["validations"][0]["expression"].startswith("variables.deferredToKueue || ")
    assert "deferredToKueue" not in variables(objects(default)[0])
