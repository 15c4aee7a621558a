"""Background audit: existing pods checked against today's policies, quotas and placement rules."""

from webhook.audit.auditor import AUDIT_VIOLATIONS, Auditor, TickResult
from webhook.audit.checks import audit_cluster, audit_pod, quota_findings
from webhook.audit.findings import Finding
from webhook.audit.pods import ApiPodReader, PodReader
from webhook.audit.reports import render_reports
from webhook.audit.writers import KubeReportWriter, MemoryReportWriter, ReportWriter

__all__ = [
    "AUDIT_VIOLATIONS",
    "ApiPodReader",
    "Auditor",
    "Finding",
    "KubeReportWriter",
    "MemoryReportWriter",
    "PodReader",
    "ReportWriter",
    "TickResult",
    "audit_cluster",
    "audit_pod",
    "quota_findings",
    "render_reports",
]
