"""Costs over a window from the pods' lifetimes (directory mode) match the hand computation in
spend_cluster.py to the cent; `kgwe costs --window` prints them as a table, JSON, YAML and CSV."""

from __future__ import annotations

import csv
import io
import json
from decimal import Decimal
from pathlib import Path

import pytest
import yaml
from spend_cluster import (
    EXPECTED_GPU_HOURS,
    EXPECTED_MONTH_SPENT,
    EXPECTED_RATE,
    EXPECTED_RUNS,
    EXPECTED_SAVINGS,
    EXPECTED_TENANTS,
    EXPECTED_TOTAL,
    EXPECTED_WORKLOADS,
    pick_now,
    stamp,
    write_cluster,
)

from webhook.cli import main
from webhook.config import load_config
from webhook.runtime import build_runtime
from webhook.spend.service import SpendService
from webhook.spend.window import month_of

NOW = pick_now()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return write_cluster(tmp_path_factory.mktemp("spend"), NOW)


@pytest.fixture(scope="module")
def service(cluster: tuple[Path, Path]) -> SpendService:
    directory, config_file = cluster
    runtime = build_runtime(load_config(config_file), directory)
    return SpendService(lambda: runtime.config, runtime.store.snapshot, clock=lambda: NOW)


def test_directory_mode_matches_the_hand_computation_to_the_cent(service: SpendService) -> None:
    doc = service.window_costs("48h")
    assert doc.window.source == "directory"
    assert (doc.window.start, doc.window.end) == (stamp(NOW - 48 * 3600), stamp(NOW))
    assert {r.tenant: r.cost for r in doc.tenants} == EXPECTED_TENANTS
    assert doc.totals.cost == EXPECTED_TOTAL
    assert {r.tenant: r.gpu_hours for r in doc.tenants} == EXPECTED_GPU_HOURS
    assert {r.tenant: r.savings for r in doc.tenants} == EXPECTED_SAVINGS
    assert [r.tenant for r in doc.tenants] == ["team-a", "team-b", "inference"]  # costliest first
    runs = {(r.kind, r.name): r for r in doc.runs}
    assert {k: r.cost for k, r in runs.items()} == EXPECTED_RUNS
    assert runs[("Job", "train")].pods == 2  # a retried pod is its own pod, charged once for its own life
    assert runs[("Job", "train")].finished == stamp(NOW - 6 * 3600)
    assert runs[("Job", "train")].complete
    workloads = {(r.namespace, r.kind, r.name): r.cost for r in doc.workloads}
    assert {k: workloads[k] for k in EXPECTED_WORKLOADS} == EXPECTED_WORKLOADS
    pods = {(r.namespace, r.pod): r for r in doc.pod_costs}
    assert pods[("team-a", "train-1")].cost == "9.00" and pods[("team-a", "train-1")].kind == "Job"
    assert pods[("inference", "nb-mig")].share == "mig" and pods[("inference", "nb-mig")].savings == "16.00"
    assert pods[("team-b", "dra-0")].share == "dra" and pods[("inference", "ts-0")].finished is None
    assert ("team-a", "waiting") not in pods  # never bound: no cost
    # No Prometheus: what the GPUs did is not known.
    assert doc.totals.idle_cost == "unknown"
    assert doc.totals.idle_unknown_cost == EXPECTED_TOTAL


def test_spend_over_time_adds_up_and_the_month_is_projected(service: SpendService) -> None:
    doc = service.window_costs("48h")
    series = {s.tenant: s.costs for s in doc.spend_over_time.tenants}
    assert doc.spend_over_time.bucket_seconds == 3600 and len(doc.spend_over_time.buckets) == 48
    # Buckets are rounded each; their exact sum is the tenant's cost.
    assert sum(Decimal(v) for v in series["team-a"]) == Decimal(EXPECTED_TENANTS["team-a"])
    month = {m.tenant: m for m in doc.month.tenants}
    start, end = month_of(NOW)
    hours_left = Decimal(int(end - NOW)) / 3600
    for tenant, spent in EXPECTED_MONTH_SPENT.items():
        assert month[tenant].spent == f"{spent.quantize(Decimal('0.01'))}"
        projected = spent + EXPECTED_RATE.get(tenant, Decimal(0)) * hours_left
        assert month[tenant].projected == f"{projected.quantize(Decimal('0.01'))}"
    assert month["team-a"].hourly_rate == "4.50"
    assert doc.month.start == stamp(start)


def test_cli_window_as_table_json_yaml_and_csv(cluster: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    directory, config_file = cluster
    base = ["costs", "--cluster", str(directory), "--config", str(config_file), "--window", "48h", "--at", str(NOW)]
    assert main(base) == 0
    table = capsys.readouterr().out
    assert "team-a" in table and "454.50" in table and "Job/train" in table and "487.08 USD" in table
    assert main([*base, "--pods"]) == 0
    assert "ft-worker-0" in capsys.readouterr().out

    assert main([*base, "-o", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["totals"]["cost"] == EXPECTED_TOTAL and doc["currency"] == "USD"
    assert doc["window"]["from"] == stamp(NOW - 48 * 3600)

    assert main([*base, "-o", "yaml"]) == 0
    assert yaml.safe_load(capsys.readouterr().out)["tenants"][0]["cost"] == "454.50"

    assert main([*base, "-o", "csv"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    tenants = {r["tenant"]: r["cost"] for r in rows if r["level"] == "tenant"}
    assert tenants == EXPECTED_TENANTS
    runs = {(r["kind"], r["name"]): r["cost"] for r in rows if r["level"] == "run"}
    assert runs == EXPECTED_RUNS
    assert [r["cost"] for r in rows if r["level"] == "total"] == [EXPECTED_TOTAL]
    assert {r["name"]: r["cost"] for r in rows if r["level"] == "pod"}["mps-1"] == "0.03"
    assert {r["from"] for r in rows} == {stamp(NOW - 48 * 3600)}


def test_the_current_view_is_unchanged_and_bad_windows_are_refused(
    cluster: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    directory, config_file = cluster
    assert main(["costs", "--cluster", str(directory), "--config", str(config_file), "-o", "json"]) == 0
    now = json.loads(capsys.readouterr().out)
    assert {"generatedAt", "currency", "rows", "hourlyCost", "pods"} <= set(now)
    assert now["hourlyCost"] == "4.70"  # edge-0 4.50 + ts-0 0.20 run now
    assert main(["costs", "--cluster", str(directory), "--config", str(config_file), "--window", "soon"]) == 2
    assert "30d" in capsys.readouterr().err
