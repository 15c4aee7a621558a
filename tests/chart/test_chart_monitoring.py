"""ServiceMonitor, PrometheusRule and dashboard: they scrape the right port and ask for metrics that exist."""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Iterator
from typing import Any

import pytest
from chart_support import NAMESPACE, REPO, Rendered

# prometheus_client's classes, and the factories that make the metrics a one-shot command imports
# (policies/kernel/metric_kinds.py).
METRIC_KINDS = {"Counter", "Gauge", "Histogram", "Summary", "counter", "gauge", "histogram"}
# Labels Prometheus adds to every scraped series, and the histogram bucket label.
TARGET_LABELS = {"job", "namespace", "pod", "instance", "service", "endpoint", "container", "le"}
# Series from the API server, Prometheus and kube-state-metrics: not KGWE's to define.
FOREIGN = re.compile(r"^(apiserver_|kube_|up$)")
# The webhook exports this one from the cluster model's topology timestamps; it is the only series a
# rule uses before the code that exports it exists (see docs/operations.md, "Metrics").
AWAITED: dict[str, set[str]] = {}


def _defined_metrics() -> dict[str, set[str]]:
    """Every prometheus_client metric KGWE's code defines, with its label names (read from the source)."""
    metrics: dict[str, set[str]] = {}
    for package in ("webhook", "policies", "agent", "certs"):
        for path in (REPO / package).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if not (isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None))
                        in METRIC_KINDS and node.args and isinstance(node.args[0], ast.Constant)
                        and isinstance(node.args[0].value, str)):
                    continue
                labels_node = node.args[2] if len(node.args) > 2 else next(
                    (k.value for k in node.keywords if k.arg == "labelnames"), None)
                labels = {e.value for e in getattr(labels_node, "elts", []) if isinstance(e, ast.Constant)}
                metrics[node.args[0].value] = {str(label) for label in labels}
    # Families of custom collectors (the per-pod cost series): their labels are the collector's.
    from webhook.controllers.bound_pods import SERIES_LABELS

    for name in ("kgwe_pod_hourly_cost", "kgwe_pod_gpu_allocation", "kgwe_pod_whole_gpu_hourly_cost"):
        metrics[name] = set(SERIES_LABELS)
    return metrics


def _base(series: str) -> str:
    return re.sub(r"_(bucket|count|sum)$", "", series)


def _expressions(rendered: Rendered) -> Iterator[tuple[str, str]]:
    rule = rendered.one("PrometheusRule")
    for group in rule["spec"]["groups"]:
        for item in group["rules"]:
            yield item.get("alert") or item["record"], item["expr"]
    dashboard = json.loads(rendered.one("ConfigMap", "kgwe-dashboard")["data"]["kgwe.json"])
    for panel in dashboard["panels"]:
        for target in panel["targets"]:
            yield panel["title"], target["expr"]


def _check(name: str, expr: str, defined: dict[str, set[str]]) -> list[str]:
    problems = []
    depth = 0
    for char in expr:
        depth += {"(": 1, ")": -1}.get(char, 0)
        if depth < 0:
            problems.append(f"{name}: unbalanced parentheses")
    if depth:
        problems.append(f"{name}: unbalanced parentheses")
    series = {_base(s) for s in re.findall(r"\b([a-z_]+)(?=\{|\s*\[|\s*\)|\s*-|\s*>|$)", expr)}
    ours = {s for s in series if s.startswith("kgwe_")}
    known = {**defined, **AWAITED}
    for metric in sorted(ours - known.keys()):
        problems.append(f"{name}: {metric} is not a metric KGWE defines")
    if ours and not any(FOREIGN.match(s) for s in series):
        allowed = TARGET_LABELS.union(*(known.get(m, set()) for m in ours))
        for clause in re.findall(r"\bby \(([^)]*)\)", expr):
            for label in (part.strip() for part in clause.split(",")):
                if label not in allowed:
                    problems.append(f"{name}: no KGWE metric in the expression has the label {label!r}")
    return problems


def test_alerts_and_dashboard_use_metrics_kgwe_exports(rendered_scenarios: dict[str, Rendered]) -> None:
    defined = _defined_metrics()
    assert "kgwe_admission_requests_total" in defined, "the metrics of the HTTP shell moved: update this test"
    problems = [p for name, expr in _expressions(rendered_scenarios["monitoring"]) for p in _check(name, expr, defined)]
    assert problems == []


def test_awaited_metrics_are_not_yet_defined() -> None:
    # Once the code exports one of them, it must leave AWAITED (and its labels are checked like the rest).
    assert not set(AWAITED) & set(_defined_metrics())


def test_rules_cover_the_outage_stories(rendered_scenarios: dict[str, Rendered]) -> None:
    alerts = {alert: expr for alert, expr in _expressions(rendered_scenarios["monitoring"]) if alert.startswith("KGWE")}
    assert "calling_webhook_error" in alerts["KGWEWebhookCallErrors"]
    assert "admission_duration_seconds_bucket" in alerts["KGWEWebhookSlow"]
    assert "kgwe_certificate_expiry_timestamp_seconds" in alerts["KGWECertificateExpiresSoon"]
    assert "kgwe_topology_age_seconds" in alerts["KGWENodeTopologyStale"]
    assert "kgwe_quota_used" in alerts["KGWETenantQuotaNearLimit"]
    assert "KGWEMutationsFailingOpen" in alerts
    assert "kgwe_budget_exceeded" in alerts["KGWEBudgetExceeded"]
    records = {name for name, _expr in _expressions(rendered_scenarios["monitoring"]) if ":" in name}
    assert {"tenant:kgwe_pod_hourly_cost:sum", "namespace_tenant:kgwe_pod_hourly_cost:sum"} <= records


def test_servicemonitor_scrapes_the_webhook_service_over_its_own_tls(rendered_scenarios: dict[str, Rendered]) -> None:
    rendered = rendered_scenarios["monitoring"]
    monitor = rendered.one("ServiceMonitor")["spec"]
    service = rendered.one("Service", "kgwe-webhook")
    labels = service["metadata"]["labels"]
    assert all(labels.get(k) == v for k, v in monitor["selector"]["matchLabels"].items())
    (endpoint,) = monitor["endpoints"]
    assert endpoint["port"] in {port["name"] for port in service["spec"]["ports"]}
    assert endpoint["scheme"] == "https" and endpoint["path"] == "/metrics"
    assert endpoint["tlsConfig"]["ca"]["secret"] == {"name": "kgwe-tls", "key": "ca.crt"}
    assert endpoint["tlsConfig"]["serverName"] == f"kgwe-webhook.{NAMESPACE}.svc"


@pytest.mark.parametrize("kind", ["ServiceMonitor", "PrometheusRule"])
def test_monitoring_objects_are_opt_in(default: Rendered, kind: str) -> None:
    # Without the Prometheus operator's CRDs an install would fail on them.
    assert default.of_kind(kind) == []


def test_dashboard_is_valid_json_for_the_grafana_sidecar(rendered_scenarios: dict[str, Rendered]) -> None:
    config_map: dict[str, Any] = rendered_scenarios["monitoring"].one("ConfigMap", "kgwe-dashboard")
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    dashboard = json.loads(config_map["data"]["kgwe.json"])
    assert dashboard["uid"] == "kgwe-overview"
    assert len({panel["id"] for panel in dashboard["panels"]}) == len(dashboard["panels"])


def test_rules_pass_promtool(rendered_scenarios: dict[str, Rendered], tmp_path: Any) -> None:
    """Prometheus' own checker accepts every rule group (recording rules and alerts)."""
    import subprocess

    import yaml
    from usage_traces import PrometheusMissing, ensure_prometheus

    try:
        _prometheus, promtool = ensure_prometheus()
    except PrometheusMissing as exc:
        pytest.skip(str(exc))
    rules = tmp_path / "rules.yaml"
    groups = rendered_scenarios["monitoring"].one("PrometheusRule")["spec"]["groups"]
    rules.write_text(yaml.safe_dump({"groups": groups}))
    checked = subprocess.run([promtool, "check", "rules", str(rules)], capture_output=True, text=True, timeout=60)
    assert checked.returncode == 0, checked.stdout + checked.stderr
