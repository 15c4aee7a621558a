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
    EXPECTED_CLAIM_PODS,
    EXPECTED_GPU_HOURS,
    EXPECTED_MONTH_SPENT,
    EXPECTED_RATE,
    EXPECTED_RUNS,
    EXPECTED_SAVINGS,
    EXPECTED_TENANTS,
    EXPECTED_TOTAL,
    EXPECTED_WORKLOADS,
    SERVE,
    pick_now,
    stamp,
    write_cluster,
)

from webhook.assembly import build_runtime
from webhook.cli import main
from webhook.config import load_config
from webhook.controllers.bound_pods import cost_series
from webhook.costs import format_hourly_cost
from webhook.spend.rates import pod_rates
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
    # GPUs held only through ResourceClaims of their own (DRA devices; no nvidia.com/gpu asked).
    assert {k: pods[k].cost for k in EXPECTED_CLAIM_PODS} == {k: c for k, (_r, c) in EXPECTED_CLAIM_PODS.items()}
    mig = pods[("inference", "claim-mig")]
    assert (mig.share, mig.accelerator_type, mig.gpu_hours, mig.savings) == (
        "mig", "nvidia-h200-141gb", "1.71", "12.80")
    train = pods[("team-b", "claim-train")]
    assert (train.share, train.accelerator_type, train.gpu_hours, train.finished) == (
        "dra", "nvidia-h200-141gb", "10.00", None)
    # One claim, two pods: charged once, to the first started; a claim not allocated holds and costs nothing.
    assert ("team-b", SERVE[1]) not in pods and ("team-b", "claim-unallocated") not in pods
    assert {(r.namespace, r.kind, r.name): r.pods for r in doc.workloads}[("team-b", "Deployment", "serve")] == 1
    # dra-0's own (KGWE's) claim is allocated too: its two GPUs are charged once, as its demand.
    assert pods[("team-b", "dra-0")].cost == "18.00"
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
    assert month["team-b"].hourly_rate == "16.80"  # claim-train's two H200s and serve's one, held through claims
    assert doc.month.start == stamp(start)


def test_cli_window_as_table_json_yaml_and_csv(cluster: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    directory, config_file = cluster
    base = ["costs", "--cluster", str(directory), "--config", str(config_file), "--window", "48h", "--at", str(NOW)]
    assert main(base) == 0
    table = capsys.readouterr().out
    assert "team-a" in table and "454.50" in table and "Job/train" in table and "575.08 USD" in table
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
    # edge-0 4.50 + ts-0 0.20 + claim-train 11.20 + serve 5.60 (one claim of two pods, charged once) run now
    assert now["hourlyCost"] == "21.50"
    assert {(p["namespace"], p["pod"]): p["hourlyCost"] for p in now["pods"] if p["namespace"] == "team-b"} == {
        ("team-b", "claim-train"): "11.20", ("team-b", SERVE[0]): "5.60"}
    assert main(["costs", "--cluster", str(directory), "--config", str(config_file), "--window", "soon"]) == 2
    assert "30d" in capsys.readouterr().err


def test_gpus_held_through_claims_cost_per_hour_in_every_view(cluster: tuple[Path, Path]) -> None:
    """The rate (what the budgets' hourly rate and the directory ledger read) and the exported series of
    the pods that hold GPUs only through claims of their own: each device at its type's price."""
    directory, config_file = cluster
    runtime = build_runtime(load_config(config_file), directory)
    model, config = runtime.store.snapshot(), runtime.config
    rates = {r.key: r for r in pod_rates(model, config)}
    for key, (hourly, _cost) in EXPECTED_CLAIM_PODS.items():
        assert format_hourly_cost(rates[key].hourly or Decimal(-1)) == format_hourly_cost(Decimal(hourly)), key
    assert rates[("inference", "claim-mig")].equivalents == Decimal(3) / 7
    assert rates[("inference", "claim-mig")].whole == Decimal("5.60")
    assert ("team-b", SERVE[1]) not in rates and ("team-b", "claim-unallocated") not in rates
    assert rates[("team-b", "dra-0")].hourly == Decimal(9)
    series = cost_series(model.pods.values(), model, config)
    by_pod = {(k[0], k[1], k[2]): v for k, v in series.items()}
    # Running pods only; the claim's devices go to the container that names it.
    assert by_pod[("team-b", "claim-train", "main")].hourly == Decimal("11.20")
    assert by_pod[("team-b", "claim-train", "main")].allocation == Decimal(2)
    assert by_pod[("team-b", SERVE[0], "main")].hourly == Decimal("5.60")
    assert not [k for k in by_pod if k[1] in (SERVE[1], "claim-unallocated", "claim-mig")]
    tenant_b = sum((v.hourly for k, v in series.items() if k[4] == "team-b"), Decimal(0))
    assert tenant_b == Decimal("16.80")
