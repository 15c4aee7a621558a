"""`kgwe recommend` (rightsizing, idle GPUs: from measured use) and `kgwe mig-plan` (MIG layouts that follow demand)."""

from __future__ import annotations

import argparse
from typing import Any

from webhook.output import FORMATS, render
from webhook.reports.reading import Cluster, CommandError, checked_prometheus_url, parse_moment
from webhook.reports.tables import format_table


def cmd_recommend(args: argparse.Namespace, cluster: Cluster) -> str:
    from webhook.usage.service import PrometheusUnavailable, UsageNotConfigured, UsageService
    from webhook.usage.views import idle_document, recommendations_document

    runtime = cluster.runtime
    checked_prometheus_url(args.prometheus)
    service = UsageService(lambda: runtime.config, runtime.store.snapshot, args.prometheus)
    try:
        report = service.report(args.namespace, parse_moment(args.at))
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
