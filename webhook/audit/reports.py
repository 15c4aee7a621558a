"""Audit findings as reports: OpenReports (`openreports.io/v1alpha1`, the default) or the Policy WG's
`wgpolicyk8s.io/v1alpha2` PolicyReports (`audit.reportFormat`; webhook/audit/formats.py).

One namespaced report (`Report` or `PolicyReport`) per namespace holds the findings about its pods and
workloads; one cluster report (`ClusterReport` or `ClusterPolicyReport`) holds the cluster-wide ones
(tenant quotas). Reports are named `kgwe-audit`, so each run replaces the last one, and a namespace whose
findings are gone gets an empty report rather than a stale one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from policies.vocabulary.objects import ObjectView
from webhook.audit.findings import Finding
from webhook.audit.formats import OPENREPORTS, ReportFormat

REPORT_NAME = "kgwe-audit"
SOURCE = "kgwe"
LABELS = {"app.kubernetes.io/managed-by": "kgwe", "app.kubernetes.io/component": "audit"}
RESULTS = ("pass", "fail", "warn", "error", "skip")


def _resource(finding: Finding) -> dict[str, Any]:
    if finding.category == "quota" and finding.quota:
        return {"apiVersion": "kgwe.io/v1alpha1", "kind": "TenantQuota", "name": finding.quota}
    reference = {
        "apiVersion": finding.api_version or "v1", "kind": finding.kind or "Pod",
        "namespace": finding.namespace, "name": finding.pod,
    }
    if finding.uid:
        reference["uid"] = finding.uid
    return reference


def report_result(finding: Finding, seen_at: float) -> dict[str, Any]:
    result: dict[str, Any] = {
        "policy": finding.policy,
        "rule": finding.rule,
        "category": finding.category,
        "severity": finding.severity,
        "result": finding.result,
        "message": finding.message,
        "source": SOURCE,
        "scored": True,
        "timestamp": {"seconds": int(seen_at), "nanos": 0},
        "resources": [_resource(finding)],
    }
    if finding.tenant:
        result["properties"] = {"tenant": finding.tenant}
    return result


def _summary(findings: Iterable[Finding]) -> dict[str, int]:
    counts = dict.fromkeys(RESULTS, 0)
    for finding in findings:
        counts[finding.result] += 1
    return counts


def _report(
    fmt: ReportFormat, namespace: str | None, findings: list[Finding], seen_at: Callable[[Finding], float]
) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": REPORT_NAME, "labels": dict(LABELS)}
    if namespace is not None:
        metadata["namespace"] = namespace
    ordered = sorted(findings)
    report: dict[str, Any] = {
        "apiVersion": fmt.api_version,
        "kind": fmt.cluster_kind if namespace is None else fmt.namespaced_kind,
        "metadata": metadata,
    }
    if fmt.report_source:
        report["source"] = SOURCE
    report["summary"] = _summary(ordered)
    report["results"] = [report_result(f, seen_at(f)) for f in ordered]
    return report


def render_reports(
    findings: Iterable[Finding],
    seen_at: Callable[[Finding], float],
    namespaces: Iterable[str] = (),
    fmt: ReportFormat = OPENREPORTS,
) -> list[dict[str, Any]]:
    """A namespaced report for every namespace with findings or listed in `namespaces`, then the cluster one.

    `seen_at(finding)` is the Unix time the finding was first seen (the result's timestamp).
    """
    by_namespace: dict[str, list[Finding]] = {namespace: [] for namespace in namespaces if namespace}
    cluster: list[Finding] = []
    for finding in findings:
        if finding.cluster_wide:
            cluster.append(finding)
        else:
            by_namespace.setdefault(finding.namespace, []).append(finding)
    reports = [_report(fmt, ns, by_namespace[ns], seen_at) for ns in sorted(by_namespace)]
    reports.append(_report(fmt, None, cluster, seen_at))
    return reports


def report_key(report: dict[str, Any]) -> tuple[str, str, str]:
    view = ObjectView(report)
    return view.kind, view.namespace, view.name


def is_cluster_report(report: dict[str, Any]) -> bool:
    return not ObjectView(report).namespace
