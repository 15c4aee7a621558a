"""The periodic background audit of `kgwe serve`: a bounded slice of the pods and workloads per tick,
round-robin.

Each tick judges at most `pods_per_tick` pods, continuing after the last pod it judged (in key order), as
many workloads after the last workload it judged (each as workload admission judges its CREATE: every
pod template as the pod it makes; webhook/audit/workloads.py), plus the tenants' quotas; it keeps the
findings of every object judged since, drops those of objects that are gone, and writes the reports whose
results changed, in the format `audit.reportFormat` names (OpenReports or wgpolicyk8s). A full pass over
N pods therefore takes ceil(N / pods_per_tick) ticks and never one long stall of the webhook's process.
With several replicas only the leader (`is_leader`, e.g. the bound-pod controller's lease) audits,
writes and exports.
"""

from __future__ import annotations

import bisect
import logging
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from prometheus_client import Gauge

from policies.kernel.background import Task
from policies.kernel.metrics import replace_series
from webhook.audit.charges import ChargeMemo
from webhook.audit.checks import audit_pod, quota_findings
from webhook.audit.findings import Finding
from webhook.audit.formats import report_format
from webhook.audit.pods import PodReader
from webhook.audit.reports import is_cluster_report, render_reports, report_key
from webhook.audit.workloads import audit_workload
from webhook.audit.writers import ReportWriter
from webhook.cluster.model import ClusterModel
from webhook.read_seams import WORKLOAD_READS
from webhook.runtime import Runtime

log = logging.getLogger("kgwe.audit")

AUDIT_VIOLATIONS = Gauge(
    "kgwe_audit_violations",
    "Violations the background audit currently sees, by category (policy, quota, placement) and namespace "
    "(empty for cluster-wide quota findings).",
    ["category", "namespace"],
)


@dataclass(frozen=True)
class TickResult:
    audited: int  # pods judged in this tick
    findings: int  # findings held after the tick
    written: int  # reports written
    completed_pass: bool  # this tick reached the end of the pod list
    workloads: int = 0  # workloads judged in this tick


class Auditor:
    def __init__(
        self,
        runtime: Runtime,
        writer: ReportWriter,
        *,
        interval_seconds: float = 60.0,
        pods_per_tick: int = 500,
        clock: Callable[[], float] = time.time,
        is_leader: Callable[[], bool] = lambda: True,
        read_pod: PodReader | None = None,
    ) -> None:
        if pods_per_tick < 1:
            raise ValueError("pods_per_tick must be at least 1")
        self.runtime = runtime
        self.writer = writer
        self.interval_seconds = interval_seconds
        self.pods_per_tick = pods_per_tick
        self.clock = clock
        self.is_leader = is_leader
        self.read_pod = read_pod
        self._cursor = ""  # the key of the last pod judged
        self._keys: tuple[int, list[str]] = (-1, [])
        self._pod_findings: dict[str, list[Finding]] = {}
        self._workload_cursor = ""
        self._workload_keys: tuple[int, list[str]] = (-1, [])
        self._workload_findings: dict[str, list[Finding]] = {}
        self._cluster_findings: list[Finding] = []
        self._quota_key: tuple[int, int] | None = None
        self._charges = ChargeMemo()
        self._first_seen: dict[Finding, float] = {}
        self._written: dict[tuple[str, str, str], dict[str, Any]] = {}
        # One tick at start, then every interval, on the task's one thread: policy engines keep one native
        # engine per thread, so the audit costs one more engine, not one per thread of a pool. A follower
        # forgets (standby): the leader owns the reports and the metric.
        self.task = Task("audit", self._tick_and_log, interval=interval_seconds, run_at_start=True,
                         leader_only=True, standby=self.forget, is_leader=lambda: self.is_leader(),
                         on_error=lambda _exc: log.exception("audit tick failed"))

    @property
    def findings(self) -> list[Finding]:
        held = [f for found in (self._pod_findings, self._workload_findings) for items in found.values()
                for f in items]
        return sorted(held + self._cluster_findings)

    def _pod_keys(self, generation: int, pods: dict[str, Any]) -> list[str]:
        if self._keys[0] != generation:
            self._keys = (generation, sorted(pods))
        return self._keys[1]

    def _workload_keys_of(self, generation: int, workloads: dict[str, Any]) -> list[str]:
        if self._workload_keys[0] != generation:
            self._workload_keys = (generation, sorted(workloads))
        return self._workload_keys[1]

    def _next_slice(self, keys: list[str], cursor: str | None = None) -> tuple[list[str], bool]:
        start = bisect.bisect_right(keys, self._cursor if cursor is None else cursor)
        chosen = keys[start:start + self.pods_per_tick]
        wrapped = start + self.pods_per_tick >= len(keys)
        if wrapped and len(chosen) < self.pods_per_tick:
            # Wrap around, without judging a pod twice in one tick.
            chosen += keys[: min(start, self.pods_per_tick - len(chosen))]
        return chosen, wrapped

    def forget(self) -> None:
        """What a follower does instead of a tick: drop the findings, reports and gauge series held."""
        self._publish_metrics([])
        self._pod_findings.clear()
        self._workload_findings.clear()
        self._cluster_findings = []
        self._written.clear()
        self._quota_key = None

    def tick(self) -> TickResult:
        if not self.is_leader():
            # A follower forgets what it knew: the leader owns the reports and the metric.
            self.forget()
            return TickResult(0, 0, 0, False)
        runtime = self.runtime
        model = runtime.store.snapshot()
        keys = self._pod_keys(model.generation, model.pods)
        for gone in [k for k in self._pod_findings if k not in model.pods]:
            del self._pod_findings[gone]
        chosen, wrapped = self._next_slice(keys)
        for key in chosen:
            found = audit_pod(runtime, model, model.pods[key], self.read_pod)
            if found:
                self._pod_findings[key] = found
            else:
                self._pod_findings.pop(key, None)
        if chosen:
            self._cursor = chosen[-1]
        judged_workloads = self._judge_workloads(model)
        # Quota use sums every pod: recomputed once per snapshot (and configuration), not per tick, each pod's
        # charge only when the pod or what it is charged by changed (webhook/audit/charges.py).
        quota_key = (model.generation, id(runtime.config))
        if quota_key != self._quota_key:
            self._cluster_findings = quota_findings(runtime, model, self._charges.usage_charges(model))
            self._quota_key = quota_key
        findings = self.findings
        now = self.clock()
        current = set(findings)
        self._first_seen = {f: self._first_seen.get(f, now) for f in current}
        self._publish_metrics(findings)
        written = self._write(findings)
        return TickResult(len(chosen), len(findings), written, wrapped, judged_workloads)

    def _judge_workloads(self, model: ClusterModel) -> int:
        """The next slice of the model's workloads, judged as their CREATE would be now (dry runs)."""
        workloads = model.workloads
        for gone in [k for k in self._workload_findings if k not in workloads]:
            del self._workload_findings[gone]
        chosen, _wrapped = self._next_slice(self._workload_keys_of(model.generation, workloads),
                                            self._workload_cursor)
        kinds = WORKLOAD_READS.value.kind_table(self.runtime.admission.seams)
        for key in chosen:
            found = audit_workload(self.runtime, workloads[key], kinds)
            if found:
                self._workload_findings[key] = found
            else:
                self._workload_findings.pop(key, None)
        if chosen:
            self._workload_cursor = chosen[-1]
        return len(chosen)

    def _publish_metrics(self, findings: list[Finding]) -> None:
        counts = Counter((f.category, f.namespace) for f in findings)
        replace_series(AUDIT_VIOLATIONS, {labels: float(count) for labels, count in counts.items()}, stale=0.0)

    def _write(self, findings: list[Finding]) -> int:
        previous_namespaces = [namespace for _kind, namespace, _name in self._written if namespace]
        fmt = report_format(self.runtime.config.audit.report_format)
        reports = render_reports(findings, self._first_seen.__getitem__, previous_namespaces, fmt)
        written = 0
        for report in reports:
            key = report_key(report)
            if self._written.get(key) == report:
                continue
            try:
                self.writer.write(report)
            except Exception as exc:  # the API may be down: try again next tick
                log.warning("writing %s %s/%s failed: %s", *key, exc)
                continue
            written += 1
            if report["results"] or is_cluster_report(report):
                self._written[key] = report
            else:
                # An emptied namespace report was written once; stop tracking that namespace.
                self._written.pop(key, None)
        return written

    def _tick_and_log(self) -> None:
        log.debug("audit tick: %s", self.tick())
