"""The two report formats the audit writes: where each lives in the API, and what its objects are called.

OpenReports (`openreports.io/v1alpha1` Report and ClusterReport) is the Policy WG's PolicyReport API moved
to its own project, the format Kyverno now writes; `wgpolicyk8s.io/v1alpha2` PolicyReport and
ClusterPolicyReport stay available for consumers (Policy Reporter, dashboards) that read only those. Both
carry the same results and summary, field for field: a report is rendered once and only its type changes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

FormatName = Literal["openreports", "wgpolicyk8s"]


@dataclass(frozen=True)
class ReportFormat:
    name: FormatName
    group: str
    version: str
    namespaced_kind: str
    cluster_kind: str
    namespaced_plural: str
    cluster_plural: str
    # OpenReports names the producer on the report too (`source`), so a consumer can tell engines apart
    # without reading every result; wgpolicyk8s has no such field.
    report_source: bool

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}"

    def plural(self, kind: str) -> str:
        return self.cluster_plural if kind == self.cluster_kind else self.namespaced_plural


OPENREPORTS = ReportFormat("openreports", "openreports.io", "v1alpha1", "Report", "ClusterReport", "reports",
                           "clusterreports", True)
WGPOLICYK8S = ReportFormat("wgpolicyk8s", "wgpolicyk8s.io", "v1alpha2", "PolicyReport", "ClusterPolicyReport",
                           "policyreports", "clusterpolicyreports", False)
FORMATS: dict[str, ReportFormat] = {f.name: f for f in (OPENREPORTS, WGPOLICYK8S)}
BY_API_VERSION: dict[str, ReportFormat] = {f.api_version: f for f in (OPENREPORTS, WGPOLICYK8S)}


def report_format(name: str) -> ReportFormat:
    """The format named in `audit.reportFormat` (the configuration validates the name)."""
    return FORMATS[name]
