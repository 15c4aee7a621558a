"""The chart's pod-guarantees ValidatingAdmissionPolicy (what holds with every webhook replica down),
rendered by the real Helm engine and evaluated with cel-python as the API server would; and the
generated-policy RBAC (config.policies.generateAdmissionPolicies)."""

from __future__ import annotations

import ast
import copy
from typing import Any

import pytest
from chart_support import NAMESPACE, Cel, Rendered, render
from test_chart_rbac import _policy_verdict

from webhook.intent import OUTPUT_ANNOTATIONS

POLICY = "kgwe-pod-guarantees"
WEBHOOK_SA = f"system:serviceaccount:{NAMESPACE}:kgwe-webhook"
GATED = {
    "apiVersion": "v1", "kind": "Pod",
    "metadata": {"name": "train", "namespace": "team-a",
                 "labels": {"kgwe.io/gang": "llm", "app": "train"},
                 "annotations": {"kgwe.io/accelerator": "nvidia-h100-80gb", "kgwe.io/tenant": "team-a",
                                 "kgwe.io/hourly-cost": "4.5"}},
    "spec": {"containers": [{"name": "c", "image": "cuda"}],
             "schedulingGates": [{"name": "kgwe.io/quota"}, {"name": "example.com/other"}]},
}


def _update(user: str) -> dict[str, Any]:
    return {"operation": "UPDATE", "namespace": "team-a", "userInfo": {"username": user, "groups": []}}


def _changed(**changes: Any) -> dict[str, Any]:
    pod = copy.deepcopy(GATED)
    for path, value in changes.items():
        field, key = path.split("__")
        section = pod["spec"] if field == "schedulingGates" else pod["metadata"][field]
        if field == "schedulingGates":
            pod["spec"]["schedulingGates"] = value
        elif value is None:
            section.pop(key)
        else:
            section[key] = value
    return pod


def verdict(cel: Cel, rendered: Rendered, new: dict[str, Any], user: str = "alice") -> str:
    return _policy_verdict(cel, rendered, _update(user), new, GATED, policy_name=POLICY)


def test_only_kgwe_lifts_its_gates(default: Rendered, cel: Cel) -> None:
    lifted = _changed(schedulingGates__x=[{"name": "example.com/other"}])
    assert verdict(cel, default, lifted).startswith("a kgwe.io/ scheduling gate is lifted by KGWE alone")
    assert verdict(cel, default, lifted, user=WEBHOOK_SA) == "allowed"
    others_lifted = _changed(schedulingGates__x=[{"name": "kgwe.io/quota"}])
    assert verdict(cel, default, others_lifted) == "allowed"  # another gate is its owner's business


@pytest.mark.parametrize(("change", "user", "expected"), [
    ({"annotations__kgwe.io/tenant": "team-b"}, "alice", "kgwe.io/ annotations are fixed at creation"),
    ({"annotations__kgwe.io/tenant": None}, "alice", "kgwe.io/ annotations are fixed at creation"),
    ({"annotations__kgwe.io/decision": "{}"}, "alice", "kgwe.io/ annotations are fixed at creation"),
    ({"annotations__kgwe.io/hourly-cost": "9"}, WEBHOOK_SA, "allowed"),  # an output: KGWE's controllers write it
    ({"annotations__kgwe.io/accelerator": "x"}, WEBHOOK_SA, "kgwe.io/ annotations are fixed at creation"),
    ({"labels__kgwe.io/gang": "other"}, WEBHOOK_SA, "kgwe.io/ labels are fixed at creation"),
    ({"labels__kgwe.io/gang": None}, "alice", "kgwe.io/ labels are fixed at creation"),
    ({"labels__app": "other", "annotations__note": "x"}, "alice", "allowed"),
])
def test_kgwe_keys_are_fixed_at_creation(default: Rendered, cel: Cel, change: dict[str, Any], user: str,
                                         expected: str) -> None:
    assert verdict(cel, default, _changed(**change), user=user) == expected


def test_pods_without_anything_of_kgwe_are_not_looked_at(default: Rendered, cel: Cel) -> None:
    plain = {"metadata": {"name": "web", "namespace": "team-a", "labels": {"app": "web"}},
             "spec": {"containers": [{"name": "c", "image": "nginx"}]}}
    relabelled = copy.deepcopy(plain)
    relabelled["metadata"]["labels"]["app"] = "other"
    assert _policy_verdict(cel, default, _update("alice"), relabelled, plain, policy_name=POLICY) == "skipped"


def test_the_output_list_is_kgwes(default: Rendered) -> None:
    spec = default.one("ValidatingAdmissionPolicy", POLICY)["spec"]
    variables = {v["name"]: v["expression"] for v in spec["variables"]}
    assert ast.literal_eval(variables["outputs"]) == list(OUTPUT_ANNOTATIONS)
    assert WEBHOOK_SA in variables["controller"]


def test_the_policy_is_bound_and_can_be_turned_off(default: Rendered) -> None:
    binding = default.one("ValidatingAdmissionPolicyBinding", POLICY)
    assert binding["spec"] == {"policyName": POLICY, "validationActions": ["Deny"]}
    off = render({"webhook": {"podGuaranteesPolicy": {"enabled": False}}})
    assert POLICY not in off.names("ValidatingAdmissionPolicy")


def test_generated_policies_are_granted_only_when_turned_on(default: Rendered) -> None:
    assert "kgwe-webhook-admission-policies" not in default.names("ClusterRole")
    on = render({"config": {"policies": {"generateAdmissionPolicies": True}}})
    (rule,) = on.one("ClusterRole", "kgwe-webhook-admission-policies")["rules"]
    assert rule["resources"] == ["validatingadmissionpolicies", "validatingadmissionpolicybindings"]
    assert set(rule["verbs"]) == {"list", "create", "update", "delete"}
    binding = on.one("ClusterRoleBinding", "kgwe-webhook-admission-policies")
    assert binding["subjects"][0]["name"] == "kgwe-webhook"
