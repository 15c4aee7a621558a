"""The command lines of the reports (`kgwe nodes`, `profiles`, `audit`, `costs`, `gangs`, `recommend`, `mig-plan`).

Light on purpose: `kgwe COMMAND --help` and the shell completion build these parsers and nothing else
(docs/performance.md, "The command line's start-up").
"""

from __future__ import annotations

import argparse
from pathlib import Path

from webhook.output import FORMATS

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


def build_parser(command: str) -> argparse.ArgumentParser:
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
