"""GPUPolicy enforcement: Deny, Warn, Audit, messageExpression, match rules, params, built-in defaults."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from policy_fixtures import gpu_pod, gpu_policy
from prometheus_client import REGISTRY

from policies.api import PolicyContext, Violation
from policies.runtime.policy_runtime import PolicyRuntime

MAX_GPUS = gpu_policy(
    "max-gpus", "Deny",
    validations=[{
        "expression": "object.spec.containers.all(c, int(c.resources.limits['nvidia.com/gpu']) <= params.max)",
        "message": "too many GPUs",
        "messageExpression": "'at most ' + string(params.max) + ' GPUs per container, got ' + "
                             "object.spec.containers[0].resources.limits['nvidia.com/gpu']",
    }],
    params={"max": 4},
)


def _mine(violations: list[Violation], name: str) -> list[Violation]:
    return [v for v in violations if v.policy == name]


def _counter(policy: str, action: str) -> float:
    return REGISTRY.get_sample_value("kgwe_policy_violations_total", {"policy": policy, "action": action}) or 0.0


def test_deny_with_message_expression(runtime: PolicyRuntime, make_context: Callable[..., PolicyContext]) -> None:
    assert runtime.reload(gpu_policies=[MAX_GPUS]).ok
    violations = _mine(runtime.check(make_context(gpu_pod(gpus="8"))), "max-gpus")
    assert violations == [Violation("max-gpus", "Deny", "at most 4 GPUs per container, got 8")]
    assert _mine(runtime.check(make_context(gpu_pod(gpus="2"))), "max-gpus") == []


def test_message_expression_failure_falls_back_to_message(
    runtime: PolicyRuntime, make_context: Callable[..., PolicyContext]
) -> None:
    policy = gpu_policy("fallback", validations=[{
        "expression": "false", "message": "static message", "messageExpression": "object.metadata.nope",
    }])
    assert runtime.reload(builtin=False, gpu_policies=[policy]).ok
    assert runtime.check(make_context(gpu_pod())) == [Violation("fallback", "Deny", "static message")]


def test_warn_and_audit_actions(runtime: PolicyRuntime, make_context: Callable[..., PolicyContext]) -> None:
    warn = {**MAX_GPUS, "metadata": {"name": "max-gpus-warn"},
            "spec": {**MAX_GPUS["spec"], "enforcementAction": "Warn"}}
    audit = {**MAX_GPUS, "metadata": {"name": "max-gpus-audit"},
             "spec": {**MAX_GPUS["spec"], "enforcementAction": "Audit"}}
    before = _counter("max-gpus-audit", "Audit")
    assert runtime.reload(builtin=False, gpu_policies=[warn, audit]).ok
    violations = runtime.check(make_context(gpu_pod(gpus="8")))
    assert {(v.policy, v.action) for v in violations} == {("max-gpus-warn", "Warn"), ("max-gpus-audit", "Audit")}
    assert _counter("max-gpus-audit", "Audit") == before + 1


def test_rego_module_deny_warn_and_params(runtime: PolicyRuntime, make_context: Callable[..., PolicyContext]) -> None:
    module = """
package kgwe.policy.owner
import rego.v1
deny contains sprintf("label %q is required", [key]) if {
    some key in input.params.required
    not input.request.object.metadata.labels[key]
}
warn contains "no cost-center label" if { not input.request.object.metadata.labels["cost-center"] }
"""
    audit = gpu_policy("owner", "Audit", rego={"module": module}, params={"required": ["owner"]})
    assert runtime.reload(builtin=False, gpu_policies=[audit]).ok
    assert set(runtime.check(make_context(gpu_pod()))) == {
        Violation("owner", "Audit", 'label "owner" is required'),
        Violation("owner", "Audit", "no cost-center label"),
    }
    deny = gpu_policy("owner", "Deny", rego={"module": module}, params={"required": ["owner", "team"]})
    assert runtime.reload(builtin=False, gpu_policies=[deny]).ok
    pod = gpu_pod(labels={"owner": "alice", "cost-center": "42"})
    assert runtime.check(make_context(pod)) == [Violation("owner", "Deny", 'label "team" is required')]


def test_match_rules_filter_before_evaluation(runtime: PolicyRuntime, make_context: Callable[..., PolicyContext]
                                              ) -> None:
    always_fails = {"expression": "false", "message": "matched"}
    policies = [
        gpu_policy("ns-only", validations=[always_fails], match={"namespaces": ["ml-research"]}),
        gpu_policy("ns-selector", validations=[always_fails],
                   match={"namespaceSelector": {"matchLabels": {"kgwe.io/default-sharing": "mig"}}}),
        gpu_policy("object-selector", validations=[always_fails],
                   match={"objectSelector": {"matchExpressions": [{"key": "tier", "operator": "In",
                                                                   "values": ["gold"]}]}}),
        gpu_policy("update-only", validations=[always_fails], match={"operations": ["UPDATE"]}),
        gpu_policy("gpu-only", validations=[always_fails], matchConditions=[
            {"name": "has-gpu", "expression": "object.spec.containers.exists(c, has(c.resources.limits) && "
                                              "'nvidia.com/gpu' in c.resources.limits)"}]),
    ]
    assert runtime.reload(builtin=False, gpu_policies=policies).ok

    def fired(pod: dict[str, Any], **kwargs: Any) -> set[str]:
        return {v.policy for v in runtime.check(make_context(pod, **kwargs))}

    assert fired(gpu_pod(namespace="team-a")) == {"gpu-only"}
    assert fired(gpu_pod(namespace="ml-research")) == {"ns-only", "gpu-only"}
    assert fired(gpu_pod(namespace="inference")) == {"ns-selector", "gpu-only"}
    assert fired(gpu_pod(labels={"tier": "gold"})) == {"object-selector", "gpu-only"}
    assert fired(gpu_pod(), operation="UPDATE") == {"update-only", "gpu-only"}
    cpu_pod = gpu_pod()
    cpu_pod["spec"]["containers"][0]["resources"] = {"limits": {"cpu": "1"}}
    assert fired(cpu_pod) == set()


def test_builtin_admission_defaults(runtime: PolicyRuntime, make_context: Callable[..., PolicyContext]) -> None:
    assert runtime.reload().ok
    violations = runtime.check(make_context(gpu_pod(privileged=True, memory=None)))
    assert {(v.policy, v.action) for v in violations} == {
        ("kgwe.admission.privileged", "Deny"), ("kgwe.admission.memory_limit", "Warn"),
    }
    assert runtime.check(make_context(gpu_pod())) == []


def test_typical_pod_passes_defaults_and_examples(
    runtime: PolicyRuntime, typical_request: dict[str, Any], cluster_summary: dict[str, Any]
) -> None:
    from policy_fixtures import ROOT

    report = runtime.reload(directories=[str(ROOT / "examples" / "policies")])
    assert report.ok, report.errors
    assert {"max-gpus-per-pod", "require-owner-label", "notebooks-default-mig"} <= set(report.loaded)
    ctx = PolicyContext(request=typical_request, namespace_object=None, cluster=cluster_summary,
                        intent={"gpus": 8, "acceleratorTypes": ["nvidia-h100-80gb"]})
    assert runtime.check(ctx) == []
