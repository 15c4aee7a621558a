"""`kgwe audit` (existing pods against today's rules) and `kgwe gangs` (gangs, their rooms and why they wait)."""

from __future__ import annotations

import argparse
import time
from typing import Any

from webhook.output import FORMATS, render
from webhook.reports.reading import Cluster, CommandError, as_json
from webhook.reports.tables import format_table


def cmd_audit(args: argparse.Namespace, cluster: Cluster) -> tuple[str, int]:
    import yaml

    from webhook.audit import ApiPodReader, audit_cluster, render_reports
    from webhook.audit.formats import report_format

    # From the API the model's pods are slimmed; policies are judged on the whole pod.
    reader = ApiPodReader(cluster.api_client) if cluster.api_client is not None else None
    findings = audit_cluster(cluster.runtime, reader)
    failing = any(f.result in ("fail", "error") for f in findings)
    status = 1 if args.exit_code and failing else 0
    if args.output == "json":
        return as_json({"findings": [f.as_dict() for f in findings]}), status
    if args.output == "yaml":
        now = time.time()
        # The format the background audit writes (audit.reportFormat): what a consumer of the cluster reads.
        fmt = report_format(cluster.runtime.config.audit.report_format)
        return yaml.safe_dump_all(render_reports(findings, lambda _f: now, (), fmt), sort_keys=False).rstrip(), status
    if not findings:
        return "No violations found.", status
    rows = [
        [f.namespace or "-", (f"{f.kind}/{f.pod}" if f.kind else f.pod) or (f"tenant {f.tenant}" if f.tenant else "-"),
         f.category, f.severity, f.result,
         f.policy, *([f.rule or "-", f.tenant or "-"] if args.output == "wide" else []), f.message]
        for f in findings
    ]
    wide = ["RULE", "TENANT"] if args.output == "wide" else []
    table = format_table(["NAMESPACE", "POD", "CATEGORY", "SEVERITY", "RESULT", "POLICY", *wide, "MESSAGE"], rows)
    return f"{table}\n\n{len(findings)} finding(s)", status


def cmd_gangs(args: argparse.Namespace, cluster: Cluster) -> str:
    from webhook.read_seams import GANG_READS, WingUnavailable

    model = cluster.runtime.store.snapshot()
    try:  # a directory keeps no records: the gang wing plans them from its pods, as the controller would
        view = GANG_READS.value.gangs_document(model, cluster.runtime.config.gangs, cluster.api_client)
    except WingUnavailable as exc:
        raise CommandError(str(exc)) from exc
    if args.output in FORMATS:
        return render(view, args.output)
    if not view["gangs"]:
        return "No gangs (pods with kgwe.io/gang and kgwe.io/gang-size)."
    wide = args.output == "wide"
    rows = [
        [g["namespace"], g["gang"], g["size"], g["present"], g["bound"], g["room"] or "-", g["state"],
         *([g["gated"], g["gpusPerPod"] or "-", g["shortGPUs"], _seconds(g["waitingSeconds"])] if wide else []),
         g["reason"]]
        for g in view["gangs"]
    ]
    extra = ["GATED", "GPUS/POD", "SHORT GPUS", "WAITING"] if wide else []
    return format_table(["NAMESPACE", "GANG", "SIZE", "PRESENT", "BOUND", "ROOM", "STATE", *extra, "REASON"], rows,
                        right=["SIZE", "PRESENT", "BOUND", *extra])


def _seconds(value: Any) -> str:
    return "-" if value is None else f"{value}s"
