"""`kgwe nodes`, `kgwe profiles`, `kgwe audit` and `kgwe costs`: the read-only views on the command line.

Each reads the cluster from `--cluster DIR` (YAML manifests) or, without it, from the Kubernetes API
(kubeconfig or in-cluster service account), builds the same runtime `kgwe serve` uses, prints one
view as a table (default; `-o wide` adds columns, as kubectl's does), JSON or YAML, and exits 0 (`kgwe audit
--exit-code`: 1 when a finding fails); errors go to stderr with exit status 2.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from webhook.output import FORMATS, render
from webhook.reports.tables import format_table

# The views, the configuration and the runtime are imported when a command runs: `kgwe nodes --help` and the
# shell completion read the parsers alone (docs/performance.md, "The command line's start-up").
if TYPE_CHECKING:
    from webhook.runtime import Runtime


class CommandError(Exception):
    pass


DESCRIPTIONS = {
    "nodes": "The node view: every node's accelerator type (and where it came from), GPUs, GPU resources "
             "allocatable and in use, MIG, sharing, NVLink and topology freshness; then a summary by type.",
    "profiles": "Hardware profiles with availability and price. With --from-nodes, propose a HardwareProfile "
                "manifest for the selected nodes instead.",
    "audit": "Check the existing GPU pods against the current policies, quotas and placement rules, and report "
             "the violations (as a table, JSON, or with -o yaml the reports audit.reportFormat names: OpenReports "
             "Report and ClusterReport, or wgpolicyk8s.io PolicyReports).",
    "gangs": "Gangs (kgwe.io/gang with kgwe.io/gang-size): size, members present, bound and gated, the NVLink room "
             "KGWE chose, and why a gang waits. In a cluster the records come from the GangLedger kgwe-gangs, which "
             "KGWE's gang controller writes; with --cluster DIR they are planned from the directory's pods, as the "
             "controller would record them (a directory keeps no records).",
    "recommend": "Recommendations from measured GPU use (Prometheus, DCGM exporter series): per workload, the "
                 "smallest shape of this cluster (MIG slice, MPS share, GPU type, GPU count) that holds its peak "
                 "memory plus rightsizing.memoryMargin, with the kgwe.io/ intent to set and the saving. With --idle: "
                 "the pods whose GPUs stayed idle, with tenant and cost (docs/usage.md).",
    "mig-plan": "MIG layouts that follow demand: for every node a MIGStrategy selects, the layout of NVIDIA's MIG "
                "manager that best serves the pods waiting for MIG slices, the workloads recommended onto slices "
                "(with a Prometheus: usage.prometheus.url or --prometheus) and the strategy's preferred profiles, "
                "under the placement rules of the GPU model; -o yaml/json also prints the mig-parted config the "
                "plans name. Nodes whose GPUs hold running pods are left as they are (docs/mig.md).",
    "costs": "GPU chargeback: the hourly rate of the running GPU pods by tenant and accelerator type, from their "
             "kgwe.io/hourly-cost annotations (computed from the pricing configuration where a pod has none). With "
             "--window: what was spent over that window (GPU-hours, cost, idle cost, savings of shares) by tenant, "
             "namespace, workload and finished run, the spend of this month and its projection to the month's end "
             "against budgets; from KGWE's cost series in Prometheus (usage.prometheus.url), else from the pods' "
             "lifetimes (docs/costs.md).",
}


def _parser(command: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=f"kgwe {command}", description=DESCRIPTIONS[command])
    parser.add_argument("--cluster", type=Path, metavar="DIR",
                        help="directory of Kubernetes YAML manifests; without it, the cluster's API")
    parser.add_argument("--config", type=Path, metavar="FILE", help="KGWE configuration file (YAML)")
    parser.add_argument("--kubeconfig", metavar="FILE",
                        help="kubeconfig for the API (default: in-cluster service account)")
    formats = ["table", "wide", *FORMATS, *(["csv"] if command == "costs" else [])]
    parser.add_argument("-o", "--output", choices=formats, default="table",
                        help="output format (default table; wide: the table with more columns)"
                        + ("; -o yaml: reports in audit.reportFormat (openreports or wgpolicyk8s)"
                           if command == "audit" else ""))
    if command == "profiles":
        parser.add_argument("--from-nodes", metavar="SELECTOR",
                            help="propose a profile for these nodes: names (a,b) or a label selector "
                                 "(key=value,key2 in (x,y))")
        parser.add_argument("--type", dest="type_id", metavar="TYPE",
                            help="propose a profile for every node of this accelerator type")
        parser.add_argument("--name", help="metadata.name of the proposed profile")
        parser.add_argument("--kueue", action="store_true",
                            help="print Kueue (kueue.x-k8s.io/v1beta2) ResourceFlavors (one per accelerator type), "
                                 "a ClusterQueue resourceGroups skeleton (whole GPUs, MIG slices) and, on DRA "
                                 "clusters, Kueue's deviceClassMappings, as YAML")
        parser.add_argument("--cohort", metavar="NAME",
                            help="with --kueue: the ClusterQueue's cohortName (borrowing between queues)")
    if command == "audit":
        parser.add_argument("--exit-code", action="store_true",
                            help="exit 1 when a finding fails or errs (as git diff --exit-code; for CI), 0 when none "
                                 "does; default: exit 0 either way")
    if command == "recommend":
        parser.add_argument("workload", nargs="?", metavar="WORKLOAD",
                            help="one workload: NAME, KIND/NAME or KIND/NAMESPACE/NAME[/PART]")
        parser.add_argument("-n", "--namespace", metavar="NS", help="only this namespace (asked of Prometheus so)")
        parser.add_argument("--prometheus", metavar="URL", help="Prometheus base URL (default usage.prometheus.url)")
        parser.add_argument("--idle", action="store_true", help="list the pods whose GPUs stayed idle instead")
        parser.add_argument("--at", metavar="TIME",
                            help="the end of the history read, RFC 3339 or unix seconds (default now; for "
                                 "recorded traces)")
    if command == "mig-plan":
        parser.add_argument("--prometheus", metavar="URL",
                            help="Prometheus base URL for recommendations (default usage.prometheus.url; without "
                                 "one, only waiting pods and preferred profiles are planned for)")
    if command == "costs":
        parser.add_argument("--pods", action="store_true",
                            help="list every pod's hourly cost too (with --window: what each pod spent)")
        parser.add_argument("--window", metavar="DURATION",
                            help="costs over this window ending now: 30d, 12h, 2w, 90m (default: the rate now)")
        parser.add_argument("--prometheus", metavar="URL",
                            help="Prometheus base URL holding KGWE's cost series (default usage.prometheus.url; "
                                 "without one, the pods' lifetimes in the cluster are used)")
        parser.add_argument("--at", metavar="TIME",
                            help="the end of the window, RFC 3339 or unix seconds (default now; for recorded "
                                 "history)")
    return parser


def parser_for(command: str) -> argparse.ArgumentParser:
    """The parser of `kgwe COMMAND` (shell completion reads its flags)."""
    return _parser(command)


@dataclass
class Cluster:
    runtime: Runtime
    api_client: Any = None  # a kubernetes ApiClient when the cluster is read from the API


def _cluster(args: argparse.Namespace) -> Cluster:
    from webhook import assembly
    from webhook.cluster.yaml_source import ClusterDirectoryError
    from webhook.config import ConfigError, load_config

    try:
        config = load_config(args.config)
    except (OSError, ConfigError) as exc:
        raise CommandError(f"configuration: {exc}") from exc
    if args.cluster is not None:
        if not args.cluster.is_dir():
            raise CommandError(f"--cluster {args.cluster}: not a directory")
        try:
            return Cluster(assembly.from_directory(config, args.cluster).runtime)
        except (OSError, ClusterDirectoryError) as exc:
            raise CommandError(f"--cluster {args.cluster}: {exc}") from exc
    return _cluster_from_api(config, args.kubeconfig)


def _cluster_from_api(config: Any, kubeconfig: str | None) -> Cluster:
    from webhook import assembly
    from webhook.cluster.kube_json import load_kube_client

    try:
        client = load_kube_client(kubeconfig)
    except Exception as exc:  # no kubeconfig, not in a pod: say how to run offline
        raise CommandError(f"cannot reach the Kubernetes API ({exc}); use --cluster DIR to read YAML files") from exc
    try:
        # Built after the store is loaded, so the cluster's GPUPolicy objects are compiled too.
        return Cluster(assembly.from_api(config, client, serving=False).runtime, client)
    except assembly.ClusterNotListed as exc:
        raise CommandError(str(exc)) from exc


def _json(document: Any) -> str:
    return render(document, "json")


def _gpu_resources(resources: dict[str, Any]) -> str:
    return ",".join(f"{k.split('/')[-1]}={v}" for k, v in sorted(resources.items()) if v) or "-"


def cmd_nodes(args: argparse.Namespace, cluster: Cluster) -> str:
    from webhook.inventory.capacity import Inventory
    from webhook.inventory.nodes import nodes_view

    runtime = cluster.runtime
    view = nodes_view(Inventory(runtime.store.snapshot(), runtime.config))
    if args.output in FORMATS:
        return render(view, args.output)
    wide = args.output == "wide"
    rows = []
    for node in view["nodes"]:
        mig = node["mig"]
        sharing = node["sharing"]
        topology = node["topology"]
        rows.append([
            node["name"],
            node["acceleratorType"] or "-",
            node["typeSource"] if node["acceleratorType"] else "-",
            node["gpus"],
            _gpu_resources(node["allocatable"]),
            _gpu_resources(node["used"]),
            f"{mig['strategy']}{'' if mig['ready'] else ' (not ready)'}" if mig["profiles"] else "-",
            f"{sharing['strategy']}x{sharing['replicas']}" if sharing["strategy"] != "none" else "-",
            node["nvlinkDomainSize"] or "-",
            ("stale" if topology["stale"] else f"{topology['ageSeconds']:.0f}s") if topology["present"] else "-",
            "cordoned" if node["unschedulable"] else "",
            *(_node_wide(node) if wide else []),
        ])
    headers = ["NAME", "TYPE", "SOURCE", "GPUS", "ALLOCATABLE", "USED", "MIG", "SHARING", "NVLINK", "TOPOLOGY",
               "STATUS"]
    wide_headers = ["PRODUCT", "MEMORY/GPU", "PODS", "GPU-EQ USED", "GPU-EQ FREE", "CLIQUE", "TAINTS"]
    nodes = format_table(headers + (wide_headers if wide else []), rows,
                         right=["GPUS", "NVLINK", "PODS", "GPU-EQ USED", "GPU-EQ FREE"])
    types = format_table(
        ["TYPE", "PRODUCT", "NODES", "GPUS", "AVAILABLE"],
        [[t["id"], t["productName"], t["nodes"], t["gpus"], t["available"]] for t in view["types"]],
        right=["NODES", "GPUS", "AVAILABLE"],
    )
    return f"{nodes}\n\n{types}"


def _node_wide(node: dict[str, Any]) -> list[Any]:
    memory = node.get("memoryMiB")
    taints = node.get("taints") or []
    return [
        node.get("productName") or "-",
        f"{memory / 1024:.0f}Gi" if memory else "-",
        node.get("pods", 0),
        node.get("usedGpuEquivalents", "-"),
        node.get("freeGpuEquivalents", "-"),
        node.get("clique") or "-",
        ",".join(f"{t.get('key')}:{t.get('effect')}" for t in taints if isinstance(t, dict)) or "-",
    ]


def _sharing_text(sharing: dict[str, Any]) -> str:
    if sharing["mode"] == "mig":
        return f"mig {sharing.get('migProfile', '?')}"
    if sharing["mode"] == "mps" and "gpuFraction" in sharing:
        return f"mps {sharing['gpuFraction']:g}"
    return str(sharing["mode"])


def _price_range_text(price_range: dict[str, Any] | None) -> str:
    """"2.80" or "2.80-4.50" per GPU-hour; "*" marks a range over every type when none has a GPU free now."""
    if price_range is None:
        return "-"
    low, high = price_range["perGPUHour"]["min"], price_range["perGPUHour"]["max"]
    return f"{low if low == high else f'{low}-{high}'}{'' if price_range['now'] else '*'}"


def cmd_profiles(args: argparse.Namespace, cluster: Cluster) -> str:
    from webhook.inventory.capacity import Inventory
    from webhook.inventory.profiles import hardware_profiles_view

    runtime = cluster.runtime
    if args.from_nodes or args.type_id:
        return _proposal(args, runtime)
    if args.kueue:
        from webhook.workloads.kueue import kueue_manifests, render_kueue

        snapshot = runtime.store.snapshot()
        cohort, dra = args.cohort, runtime.config.dra
        # The manifests are YAML already (with comments that say what to change); JSON is asked for.
        if args.output == "json":
            return _json(kueue_manifests(snapshot, cohort=cohort, dra=dra))
        return render_kueue(snapshot, cohort=cohort, dra=dra)
    view = hardware_profiles_view(Inventory(runtime.store.snapshot(), runtime.config))
    if args.output in FORMATS:
        return render(view, args.output)
    wide = args.output == "wide"
    rows = [
        [p["name"], p["displayName"], _sharing_text(p["sharing"]), ",".join(t["id"] for t in p["acceleratorTypes"]),
         p["total"], p["available"], p["pending"], _price_range_text(p["priceRange"]),
         *([p["unit"], p["pricePerUnitHour"] or "-", p["description"] or "-"] if wide else [])]
        for p in view["profiles"]
    ]
    if not rows:
        return "No HardwareProfiles. Propose one with: kgwe profiles --from-nodes NODE[,NODE...]"
    table = format_table(
        ["NAME", "DISPLAY NAME", "SHARING", "TYPES", "TOTAL", "AVAILABLE", "PENDING", f"{view['currency']}/GPU-H",
         *(["UNIT", f"{view['currency']}/UNIT-H", "DESCRIPTION"] if wide else [])],
        rows, right=["TOTAL", "AVAILABLE", "PENDING"],
    )
    if any(p["priceRange"] and not p["priceRange"]["now"] for p in view["profiles"]):
        table += "\n* nothing free now: the price over every type of the profile"
    return table


def _proposal(args: argparse.Namespace, runtime: Runtime) -> str:
    from webhook.profile_proposal import ProposalError, propose_profile

    try:
        proposal = propose_profile(
            runtime.store.snapshot(), runtime.config, selection=args.from_nodes, type_id=args.type_id, name=args.name
        )
    except ProposalError as exc:
        raise CommandError(str(exc)) from exc
    if args.output in FORMATS:
        return render(proposal.as_document(), args.output)
    notes = "".join(f"# note: {note}\n" for note in proposal.notes)
    return f"# Proposed from nodes: {', '.join(proposal.nodes)}\n{notes}{proposal.to_yaml().rstrip()}"


def cmd_audit(args: argparse.Namespace, cluster: Cluster) -> tuple[str, int]:
    import time

    import yaml

    from webhook.audit import ApiPodReader, audit_cluster, render_reports
    from webhook.audit.formats import report_format

    # From the API the model's pods are slimmed; policies are judged on the whole pod.
    reader = ApiPodReader(cluster.api_client) if cluster.api_client is not None else None
    findings = audit_cluster(cluster.runtime, reader)
    failing = any(f.result in ("fail", "error") for f in findings)
    status = 1 if args.exit_code and failing else 0
    if args.output == "json":
        return _json({"findings": [f.as_dict() for f in findings]}), status
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


def cmd_costs(args: argparse.Namespace, cluster: Cluster) -> str:
    from webhook.inventory.capacity import Inventory
    from webhook.inventory.chargeback import costs_view

    runtime = cluster.runtime
    if args.window is not None:
        return _window_costs(args, runtime)
    view = costs_view(Inventory(runtime.store.snapshot(), runtime.config))
    if args.output in FORMATS:
        return render(view, args.output)
    if args.output == "csv":
        return _csv([["tenant", "acceleratorType", "pods", "unpricedPods", "hourlyCost", "dailyCost", "monthlyCost"],
                     *[[str(r[k]) for k in ("tenant", "acceleratorType", "pods", "unpricedPods", "hourlyCost",
                                            "dailyCost", "monthlyCost")] for r in view["rows"]]])
    currency = view["currency"]
    wide = args.output == "wide"
    rows = [
        [r["tenant"], r["acceleratorType"], r["pods"], r["hourlyCost"], r["dailyCost"], r["monthlyCost"],
         *([r["unpricedPods"]] if wide else [])]
        for r in view["rows"]
    ]
    if not rows:
        return "No running GPU pods."
    headers = ["TENANT", "TYPE", "PODS", f"{currency}/HOUR", f"{currency}/DAY", f"{currency}/MONTH",
               *(["UNPRICED PODS"] if wide else [])]
    text = format_table(headers, rows, right=headers[2:])
    text += f"\n\nTotal: {view['hourlyCost']} {currency}/hour (now; a month is 730 hours)"
    unpriced = sum(r["unpricedPods"] for r in view["rows"])
    if unpriced:
        text += f"\n{unpriced} pod(s) have no price: their type has none in the pricing configuration"
    if args.pods or wide:
        pods = format_table(
            ["NAMESPACE", "POD", "TENANT", "TYPE", f"{currency}/HOUR", "FROM"],
            [[p["namespace"], p["pod"], p["tenant"], p["acceleratorType"], p["hourlyCost"], p["source"]]
             for p in view["pods"]],
            right=[f"{currency}/HOUR"],
        )
        text += f"\n\n{pods}"
    return text


def _csv(rows: list[list[str]]) -> str:
    import csv
    import io

    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerows(rows)
    return out.getvalue().rstrip("\n")


def _window_costs(args: argparse.Namespace, runtime: Runtime) -> str:
    from webhook.spend.report import csv_rows
    from webhook.spend.service import SpendService
    from webhook.spend.window import WindowError
    from webhook.usage.prometheus import PrometheusUnavailable

    if args.prometheus is not None and not args.prometheus.startswith(("http://", "https://")):
        raise CommandError(f"--prometheus {args.prometheus!r}: expected http://HOST[:PORT] or https://HOST[:PORT]")
    service = SpendService(lambda: runtime.config, runtime.store.snapshot, args.prometheus)
    try:
        doc = service.window_costs(args.window, at=_moment(args.at))
    except (WindowError, PrometheusUnavailable) as exc:
        raise CommandError(str(exc)) from exc
    data = doc.model_dump(mode="json")
    if args.output in FORMATS:
        return render({"currency": runtime.config.pricing.currency, **data}, args.output)
    if args.output == "csv":
        return _csv(csv_rows(doc))
    return _window_table(doc, runtime.config.pricing.currency, args.pods or args.output == "wide")


def _window_table(doc: Any, currency: str, show_pods: bool = False) -> str:
    window = doc.window
    money = ["GPU-HOURS", currency, f"IDLE {currency}", f"SAVED {currency}"]

    def figures(row: Any) -> list[Any]:
        return [row.pods, row.gpu_hours, row.cost, row.idle_cost, row.savings]

    parts = [f"Costs {window.start} .. {window.end} ({window.duration}, from {window.source})"]
    if not doc.tenants:
        parts.append("No GPU pods ran in this window.")
    else:
        parts.append(format_table(["TENANT", "PODS", *money], [[r.tenant, *figures(r)] for r in doc.tenants],
                                  right=["PODS", *money]))
        parts.append(format_table(["NAMESPACE", "TENANT", "PODS", *money],
                                  [[r.namespace, r.tenant, *figures(r)] for r in doc.namespaces],
                                  right=["PODS", *money]))
        parts.append(format_table(["WORKLOAD", "NAMESPACE", "PODS", *money],
                                  [[f"{r.kind}/{r.name}", r.namespace, *figures(r)] for r in doc.workloads],
                                  right=["PODS", *money]))
    finished = [r for r in doc.runs if r.finished]
    if finished:
        parts.append(format_table(
            ["RUN", "NAMESPACE", "STARTED", "FINISHED", "PODS", "GPU-HOURS", currency],
            [[f"{r.kind}/{r.name}" + ("" if r.complete else " (part)"), r.namespace, r.started or "-", r.finished,
              r.pods, r.gpu_hours, r.cost] for r in finished],
            right=["PODS", "GPU-HOURS", currency]))
    if show_pods and doc.pod_costs:
        parts.append(format_table(
            ["POD", "NAMESPACE", "WORKLOAD", "SHARE", "STARTED", "FINISHED", "GPU-HOURS", currency,
             f"SAVED {currency}"],
            [[r.pod, r.namespace, f"{r.kind}/{r.name}", r.share, r.started or "-", r.finished or "running", r.gpu_hours,
              r.cost, r.savings] for r in doc.pod_costs],
            right=["GPU-HOURS", currency, f"SAVED {currency}"]))
    totals = doc.totals
    parts.append(f"Total: {totals.cost} {currency}, {totals.gpu_hours} GPU-hours, idle {totals.idle_cost}, "
                 f"saved by shares {totals.savings}")
    month = doc.month
    rows = [[m.tenant, m.spent, m.hourly_rate, m.projected, m.budget or "-",
             f"{m.state} ({m.ratio})" if m.state else "-"] for m in month.tenants]
    if rows:
        parts.append(format_table(["TENANT", f"SPENT {currency}", f"{currency}/HOUR", "PROJECTED", "BUDGET", "STATE"],
                                  rows, right=[f"SPENT {currency}", f"{currency}/HOUR", "PROJECTED", "BUDGET"]))
    parts.append(f"This month ({month.start} .. {month.end}): spent {month.spent} {currency}, projected "
                 f"{month.projected} {currency} at {month.hourly_rate} {currency}/hour to the month's end")
    return "\n\n".join(parts)


def cmd_gangs(args: argparse.Namespace, cluster: Cluster) -> str:
    from webhook.gangs.ledger import GangStoreUnavailable, KubeGangStore
    from webhook.gangs.planning import planned_records
    from webhook.gangs.view import gangs_view

    model = cluster.runtime.store.snapshot()
    if cluster.api_client is None:  # a directory keeps no records: planned from its pods, as the controller would
        view = gangs_view(model, planned_records(model, cluster.runtime.config.gangs, time.time()), recorded=False)
    else:
        from kubernetes import client as k8s

        try:
            records = KubeGangStore(k8s.CustomObjectsApi(cluster.api_client)).read(timeout=30).records
        except GangStoreUnavailable as exc:
            raise CommandError(str(exc)) from exc
        view = gangs_view(model, records)
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


def _moment(text: str | None) -> float | None:
    if text is None:
        return None
    from datetime import datetime

    try:
        return float(text)
    except ValueError:
        pass
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        raise CommandError(f"--at {text!r}: expected RFC 3339 (2026-01-31T12:00:00Z) or unix seconds") from None


def cmd_recommend(args: argparse.Namespace, cluster: Cluster) -> str:
    from webhook.usage.service import PrometheusUnavailable, UsageNotConfigured, UsageService
    from webhook.usage.views import idle_document, recommendations_document

    runtime = cluster.runtime
    if args.prometheus is not None and not args.prometheus.startswith(("http://", "https://")):
        raise CommandError(f"--prometheus {args.prometheus!r}: expected http://HOST[:PORT] or https://HOST[:PORT]")
    service = UsageService(lambda: runtime.config, runtime.store.snapshot, args.prometheus)
    try:
        report = service.report(args.namespace, _moment(args.at))
    except (UsageNotConfigured, PrometheusUnavailable) as exc:
        raise CommandError(str(exc)) from exc
    doc = idle_document(report, args.namespace) if args.idle else recommendations_document(
        report, args.namespace, args.workload)
    if args.output in FORMATS:
        return render(doc, args.output)
    currency = doc["currency"]
    if args.idle:
        if not doc["idle"]:
            return "No idle GPUs."
        rows = [[i["namespace"], i["pod"], i["tenant"], i["acceleratorType"], i["gpuEquivalents"],
                 i["hourlyCost"] or "-", f"{i['idleHours']:g}h", i["highestEngineActivity"]] for i in doc["idle"]]
        table = format_table(["NAMESPACE", "POD", "TENANT", "TYPE", "GPUS", f"{currency}/HOUR", "IDLE FOR",
                              "MAX ACTIVITY"], rows, right=["GPUS", f"{currency}/HOUR"])
        return f"{table}\n\nIdle: {doc['gpuEquivalents']} GPU-equivalents, {doc['hourlyCost']} {currency}/hour"
    wide = args.output == "wide"
    rows = [
        [r["key"], r["podsNow"], r["asks"]["shape"], f"{r['peakMemoryMib'] / 1024:.1f}Gi",
         "-" if r["engineActivityP95"] is None else f"{r['engineActivityP95']:.2f}",
         r["recommended"]["shape"] if r["change"] else "(keep)", r["saved"]["gpuEquivalentsPerPod"],
         r["saved"]["hourlyPerPod"] or "-", r["confidenceLevel"], *(_recommend_wide(r) if wide else [])]
        for r in doc["recommendations"]
    ]
    text = format_table(["WORKLOAD", "PODS", "ASKS", "PEAK MEM", "P95 BUSY", "RECOMMENDED", "GPUS SAVED/POD",
                         f"{currency}/HOUR/POD", "CONFIDENCE", *(["HISTORY", "INTENT"] if wide else [])], rows,
                        right=["PODS", "PEAK MEM", "P95 BUSY", "GPUS SAVED/POD", f"{currency}/HOUR/POD"]) \
        if rows else "No workload has enough history for a recommendation."
    text += (f"\n\nFrees {doc['gpuEquivalentsSaved']} GPU-equivalents, {doc['hourlySaved']} {currency}/hour "
             f"(pods holding GPUs now)")
    if doc["withoutEnoughHistory"]:
        text += f"\nNot enough history yet (rightsizing.minHistory): {', '.join(doc['withoutEnoughHistory'])}"
    return text


def cmd_mig_plan(args: argparse.Namespace, cluster: Cluster) -> str:
    from webhook.migplan.views import plan_cluster
    from webhook.usage.service import PrometheusUnavailable, UsageNotConfigured, UsageService

    runtime = cluster.runtime
    model = runtime.store.snapshot()
    recommendations = None
    if args.prometheus is not None or runtime.config.usage.prometheus.url:
        service = UsageService(lambda: runtime.config, runtime.store.snapshot, args.prometheus)
        try:
            recommendations = service.report().recommendations
            note = "recommendations read from Prometheus"
        except (UsageNotConfigured, PrometheusUnavailable) as exc:
            note = f"no recommendations ({exc})"
    else:
        note = "no recommendations (no Prometheus: usage.prometheus.url or --prometheus)"
    doc = plan_cluster(model, recommendations=recommendations, usage_note=note).document()
    if args.output in FORMATS:
        return render(doc, args.output)
    rows = [[s["name"], s["mode"] or "-", n["node"], n["acceleratorType"], n["gpus"], n["action"],
             _profiles_text(n["current"]), _profiles_text(n["planned"]) if n["action"] == "change" else "-",
             n["config"] or "-", n["reason"]]
            for s in doc["strategies"] for n in s["nodes"]]
    problems = [s["problem"] for s in doc["strategies"] if s["problem"]]
    if not doc["strategies"]:
        text = "No MIGStrategy: nothing to plan (docs/mig.md)."
    else:
        text = format_table(["STRATEGY", "MODE", "NODE", "TYPE", "GPUS", "ACTION", "NOW", "PLANNED", "CONFIG",
                             "WHY"], rows, right=["GPUS"]) if rows else "No MIG-capable node is selected."
    for problem in problems:
        text += f"\n{problem}"
    if doc["unserved"]:
        text += "\nUnserved: " + ", ".join(f"{w['who']} ({w['slices']}x {' | '.join(w['options'])})"
                                          for w in doc["unserved"])
    return f"{text}\n{doc['usage']}"


def _profiles_text(profiles: dict[str, int]) -> str:
    return ",".join(f"{n}x{p}" for p, n in sorted(profiles.items())) or "-"


def _recommend_wide(row: dict[str, Any]) -> list[str]:
    intent = (row.get("recommended") or {}).get("intent") or {}
    history = row.get("historyHours")
    return [f"{history:g}h" if isinstance(history, int | float) else "-",
            ",".join(f"{k}={v}" for k, v in intent.items()) if isinstance(intent, dict) else str(intent)]


Command = Callable[[argparse.Namespace, Cluster], "str | tuple[str, int]"]
COMMANDS: dict[str, Command] = {
    "nodes": cmd_nodes,
    "profiles": cmd_profiles,
    "audit": cmd_audit,
    "costs": cmd_costs,
    "gangs": cmd_gangs,
    "recommend": cmd_recommend,
    "mig-plan": cmd_mig_plan,
}


def run(command: str, argv: list[str]) -> int:
    """Run `kgwe COMMAND ARGV...`; returns the exit status."""
    if command not in COMMANDS:
        print(f"kgwe: unknown report {command!r} (expected: {', '.join(COMMANDS)})", file=sys.stderr)
        return 2
    parser = _parser(command)
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help (0) or a usage error (2, already printed)
        return int(exc.code or 0)
    try:
        output = COMMANDS[command](args, _cluster(args))
    except CommandError as exc:
        print(f"kgwe {command}: {exc}", file=sys.stderr)
        return 2
    text, status = output if isinstance(output, tuple) else (output, 0)
    sys.stdout.write(text + "\n")
    return status
