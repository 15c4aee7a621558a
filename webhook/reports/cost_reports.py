"""`kgwe costs`: the hourly rate of the running GPU pods, or (`--window`) what was spent over a window."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from webhook.output import FORMATS, render
from webhook.reports.reading import Cluster, CommandError, as_csv, checked_prometheus_url, parse_moment
from webhook.reports.tables import format_table

if TYPE_CHECKING:
    from webhook.runtime import Runtime


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
        return as_csv([["tenant", "acceleratorType", "pods", "unpricedPods", "hourlyCost", "dailyCost", "monthlyCost"],
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


def _window_costs(args: argparse.Namespace, runtime: Runtime) -> str:
    from webhook.spend.report import csv_rows
    from webhook.spend.service import SpendService
    from webhook.spend.window import WindowError
    from webhook.usage.prometheus import PrometheusUnavailable

    checked_prometheus_url(args.prometheus)
    service = SpendService(lambda: runtime.config, runtime.store.snapshot, args.prometheus)
    try:
        doc = service.window_costs(args.window, at=parse_moment(args.at))
    except (WindowError, PrometheusUnavailable) as exc:
        raise CommandError(str(exc)) from exc
    data = doc.model_dump(mode="json")
    if args.output in FORMATS:
        return render({"currency": runtime.config.pricing.currency, **data}, args.output)
    if args.output == "csv":
        return as_csv(csv_rows(doc))
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
