"""Checks of existing pods and quotas against what admission enforces now.

Policies change, limits get lowered, nodes get relabelled: a pod admitted yesterday may break today's
rules. These checks judge the pods already in the cluster model the way `/validate` judges a new one:

- policy: every GPUPolicy and Rego module (`runtime.policies.check`) with the pod as the object of a
  CREATE, so a policy's own enforcement action decides the severity (Deny high, Audit medium, Warn low);
- quota: a tenant whose running pods use more than a limit now allows (a limit lowered under usage);
- placement: a pod whose intent the placement plan now refuses, or a bound pod on a node whose
  accelerator type its intent no longer allows.

Only GPU pods are judged (pods asking GPU resources or carrying KGWE intent), as at admission.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from policies.api import PolicyContext, Violation
from policies.gpu_demand import pod_gpu_demand
from policies.quota.model import format_gpus, format_memory, quota_name, resolve_tenant, tenant_of_quota
from policies.quota.usage import UsageLine, usage_lines
from policies.vocabulary.objects import PodView
from webhook.audit.findings import AUDIT_USER, Finding, Result, Severity
from webhook.audit.pods import PodReader
from webhook.audit.workloads import workload_findings
from webhook.cluster.model import ClusterModel, pod_is_finished
from webhook.intent import OUT_TENANT, PodIntent, parse_intent
from webhook.placement.plan import build_plan
from webhook.quota_charges import usage_charges

if TYPE_CHECKING:
    from webhook.runtime import Runtime

log = logging.getLogger("kgwe.audit")

SEVERITY_OF_ACTION: dict[str, tuple[Severity, Result]] = {
    "Deny": ("high", "fail"),
    "Audit": ("medium", "fail"),
    "Warn": ("low", "warn"),
}


def _identity(pod: dict[str, Any]) -> tuple[str, str, str | None]:
    view = PodView(pod)
    return view.namespace, view.name, view.uid or None


def is_audited(pod: dict[str, Any], intent: PodIntent, excluded_namespaces: Iterable[str]) -> bool:
    """Unfinished GPU pods outside the excluded namespaces."""
    if pod_is_finished(pod) or _identity(pod)[0] in set(excluded_namespaces):
        return False
    return pod_gpu_demand(pod).asks_gpu or not intent.empty


def _review_request(pod: dict[str, Any]) -> dict[str, Any]:
    """The AdmissionReview request under which an existing pod is judged: its CREATE, as a dry run."""
    namespace, name, uid = _identity(pod)
    pods = {"group": "", "version": "v1", "resource": "pods"}
    kind = {"group": "", "version": "v1", "kind": "Pod"}
    return {
        "uid": f"kgwe-audit-{uid or f'{namespace}/{name}'}",
        "kind": kind,
        "resource": pods,
        "requestKind": kind,
        "requestResource": pods,
        "name": name,
        "namespace": namespace,
        "operation": "CREATE",
        "userInfo": {"username": AUDIT_USER, "groups": ["system:serviceaccounts"]},
        "object": pod,
        "oldObject": None,
        "dryRun": True,
    }


def pod_tenant(pod: dict[str, Any], model: ClusterModel) -> str:
    namespace = _identity(pod)[0]
    recorded = PodView(pod).annotation(OUT_TENANT)
    if recorded:
        return recorded
    tenant, _quotas = resolve_tenant(
        namespace, model.namespace_labels(namespace), [], list(model.tenant_quotas.values())
    )
    return tenant


def policy_findings(runtime: Runtime, model: ClusterModel, pod: dict[str, Any], intent: PodIntent) -> list[Finding]:
    if runtime.policies is None:
        return []
    namespace, name, uid = _identity(pod)
    tenant = pod_tenant(pod, model)
    context = PolicyContext(
        request=_review_request(pod),
        namespace_object=model.namespaces.get(namespace),
        cluster=model.summary(),
        intent=intent.as_policy_input(),
        tenant=tenant,
    )
    try:
        violations: list[Violation] = runtime.policies.check(context)
    except Exception as exc:  # an engine failure must not stop the audit of the other pods
        log.warning("audit of %s/%s: policy evaluation failed: %s", namespace, name, exc)
        return [Finding("policy", namespace, name, "kgwe-audit", "evaluation", "medium",
                        f"policies could not be evaluated: {exc}", "error", uid, tenant)]
    findings = []
    for violation in violations:
        severity, result = SEVERITY_OF_ACTION.get(violation.action, ("medium", "fail"))
        findings.append(Finding(
            "policy", namespace, name, violation.policy, violation.action.lower(), severity,
            violation.message, result, uid, tenant,
        ))
    return findings


def placement_findings(runtime: Runtime, model: ClusterModel, pod: dict[str, Any], intent: PodIntent) -> list[Finding]:
    if intent.empty and not intent.problems:
        return []
    namespace, name, uid = _identity(pod)
    if intent.problems:
        return [Finding("placement", namespace, name, "kgwe-placement", "invalid-intent", "medium",
                        "; ".join(intent.problems), "fail", uid)]
    plan = build_plan(pod, intent, None, model, runtime.config)
    node_name = PodView(pod).node_name
    if plan.refusals:
        where = f" (it runs on {node_name})" if node_name else " (it is not scheduled yet)"
        return [Finding("placement", namespace, name, "kgwe-placement", "refused", "medium",
                        f"admission would now refuse this pod{where}: {'; '.join(plan.refusals)}", "fail", uid)]
    node = model.nodes.get(node_name) if node_name else None
    if node is None or not node.is_typed or not plan.types or node.accelerator_type in plan.types:
        return []
    return [Finding(
        "placement", namespace, name, "kgwe-placement", "wrong-type", "high",
        f"runs on node {node.name} ({node.accelerator_type}), which its intent excludes; "
        f"it may run on {', '.join(plan.types)}",
        "fail", uid,
    )]


def audit_pod(
    runtime: Runtime, model: ClusterModel, pod: dict[str, Any], read_pod: PodReader | None = None
) -> list[Finding]:
    """Policy and placement findings of one pod (nothing for pods admission would not judge).

    `read_pod` gives the whole pod for the policies where the model holds a slimmed copy (in a cluster).
    """
    intent = parse_intent(pod)
    if not is_audited(pod, intent, runtime.config.excluded_namespaces):
        return []
    whole = read_pod(pod) if read_pod is not None else pod
    if whole is None:  # deleted meanwhile
        return []
    return placement_findings(runtime, model, pod, intent) + policy_findings(runtime, model, whole, intent)


def _quota_finding(line: UsageLine) -> Finding | None:
    key = line.key.described
    if line.limit_gpus is not None and line.used_gpus > line.limit_gpus:
        message = (
            f"tenant {line.tenant}: {key} {format_gpus(line.used_gpus)} of {format_gpus(line.limit_gpus)} GPUs "
            "in use; the running pods exceed the limit (was it lowered?)"
        )
        rule = "gpus"
    elif line.limit_memory is not None and line.used_memory > line.limit_memory:
        message = (
            f"tenant {line.tenant}: {key} {format_memory(line.used_memory)} of {format_memory(line.limit_memory)} "
            "GPU memory in use; the running pods exceed the limit (was it lowered?)"
        )
        rule = "gpuMemory"
    else:
        return None
    return Finding("quota", "", "", f"TenantQuota/{line.quota}", f"{line.key.metric_type}:{rule}", "high",
                   message, "fail", None, line.tenant, line.quota)


def quota_findings(runtime: Runtime, model: ClusterModel, charges: list[Any] | None = None) -> list[Finding]:
    """Tenants using more than a limit allows, from the unfinished pods (gated pods hold nothing)."""
    if not model.tenant_quotas:
        return []
    pods = charges if charges is not None else usage_charges(model)
    by_tenant: dict[str, list[dict[str, Any]]] = {}
    for quota in sorted(model.tenant_quotas.values(), key=quota_name):
        by_tenant.setdefault(tenant_of_quota(quota), []).append(quota)
    findings = []
    for tenant, quotas in sorted(by_tenant.items()):
        for line in usage_lines(tenant, quotas, pods, runtime.config.price_per_gpu_hour):
            finding = _quota_finding(line)
            if finding is not None:
                findings.append(finding)
    return findings


def audit_cluster(runtime: Runtime, read_pod: PodReader | None = None) -> list[Finding]:
    """Every finding of the current snapshot: each GPU pod, each tenant's quotas, then each GPU workload
    the validating webhook would refuse now (webhook/audit/workloads.py)."""
    model = runtime.store.snapshot()
    findings: list[Finding] = []
    for key in sorted(model.pods):
        findings.extend(audit_pod(runtime, model, model.pods[key], read_pod))
    findings.extend(quota_findings(runtime, model))
    findings.extend(workload_findings(runtime, model))
    return findings
