"""Costs over a window through a real Prometheus (Debian's `prometheus`, installed when missing and root, else
skipped), loaded with the cost series KGWE's exporter writes for the test cluster of spend_cluster.py,
one sample a minute while each pod held its GPUs, and DCGM series for two pods: the same figures as the
hand computation, to the cent, plus idle cost where usage is known.

For the first three hours of train-0 a second replica exported it too (a leader change), with another node
label (as before a rebinding): one pod, charged once.

Backfilled series carry no staleness markers, which end a scraped series at the scrape after its pod
went; `--query.lookback-delta=59s` (under the sample spacing) ends them at their last sample instead.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path

import pytest
from spend_cluster import (
    EXPECTED_CLAIM_PODS,
    EXPECTED_GPU_HOURS,
    EXPECTED_RUNS,
    EXPECTED_SAVINGS,
    EXPECTED_TENANTS,
    EXPECTED_TOTAL,
    EXPECTED_WORKLOADS,
    SERVE,
    pick_now,
    pods,
    stamp,
    write_cluster,
)
from usage_traces import PrometheusMissing, ensure_prometheus, prometheus_with

from policies.vocabulary.objects import PodView
from webhook.assembly import build_runtime
from webhook.cli import main
from webhook.config import load_config
from webhook.controllers.bound_pods import SERIES_LABELS, cost_series
from webhook.spend.rates import lifetime
from webhook.spend.service import SpendService

NOW = pick_now()
STEP = 60
FAMILIES = (("kgwe_pod_hourly_cost", "hourly"), ("kgwe_pod_gpu_allocation", "allocation"),
            ("kgwe_pod_whole_gpu_hourly_cost", "whole"))
# Engine activity per pod: nb-mig idle all along, train-0 busy all along; the others have no DCGM series.
ACTIVITY = {"nb-mig": 0.01, "train-0": 0.9}


def _labels(names: list[str], values: tuple[str, ...]) -> str:
    return ",".join(f'{n}="{v}"' for n, v in zip(names, values, strict=True))


def recorded(directory: Path, config_file: Path) -> str:
    """The OpenMetrics text of what the exporter would have exported each minute each pod ran."""
    runtime = build_runtime(load_config(config_file), directory)
    model, config = runtime.store.snapshot(), runtime.config
    lines: dict[str, list[str]] = {name: [] for name, _ in FAMILIES}
    dcgm: list[str] = []
    for pod in pods(NOW):
        start, end = lifetime(PodView(pod))
        if start is None or not pod["spec"].get("nodeName"):
            continue
        running = copy.deepcopy(pod)  # as the exporter saw it while it ran (with the claims made for it)
        running["status"] = {"phase": "Running", "startTime": pod["status"]["startTime"],
                             **{k: v for k, v in pod["status"].items() if k == "resourceClaimStatuses"}}
        series = cost_series([running], model, config)
        stop = end if end is not None else NOW
        moment = start
        while moment < stop:
            twice = pod["metadata"]["name"] == "train-0" and moment < start + 3 * 3600
            for key, values in series.items():
                for name, field in FAMILIES:
                    value = getattr(values, field)
                    lines[name].append(f'{name}{{{_labels(SERIES_LABELS, key)},instance="a"}} {float(value)!r} '
                                       f"{moment:.0f}")
                    if twice:
                        other = tuple("h100-b" if label == "node" else v for label, v in zip(SERIES_LABELS, key,
                                                                                               strict=True))
                        lines[name].append(f'{name}{{{_labels(SERIES_LABELS, other)},instance="b"}} '
                                           f"{float(value)!r} {moment:.0f}")
            activity = ACTIVITY.get(pod["metadata"]["name"])
            if activity is not None:
                labels = (f'gpu="0",UUID="GPU-{pod["metadata"]["name"]}",modelName="NVIDIA A100",Hostname="n",'
                          f'container="main",namespace="{pod["metadata"]["namespace"]}",'
                          f'pod="{pod["metadata"]["name"]}"')
                dcgm.append(f"DCGM_FI_PROF_GR_ENGINE_ACTIVE{{{labels}}} {activity} {moment:.0f}")
            moment += STEP
    parts: list[str] = []
    for name, _field in FAMILIES:
        parts += [f"# TYPE {name} gauge", *lines[name]]
    parts += ["# TYPE DCGM_FI_PROF_GR_ENGINE_ACTIVE gauge", *dcgm, "# EOF", ""]
    return "\n".join(parts)


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path, Path]]:
    try:
        ensure_prometheus()
    except PrometheusMissing as exc:
        pytest.skip(str(exc))
    directory, config_file = write_cluster(tmp_path_factory.mktemp("spend-prom"), NOW)
    with prometheus_with(recorded(directory, config_file), flags=("--query.lookback-delta=59s",)) as url:
        yield url, directory, config_file


def _service(url: str, directory: Path, config_file: Path, source: str = "auto") -> SpendService:
    runtime = build_runtime(load_config(config_file), directory)
    config = runtime.config.model_copy(update={
        "usage": runtime.config.usage.model_copy(update={
            "prometheus": runtime.config.usage.prometheus.model_copy(update={"url": url})}),
        "costs": runtime.config.costs.model_copy(update={"source": source}),
    })
    return SpendService(lambda: config, runtime.store.snapshot, clock=lambda: NOW)


def test_prometheus_mode_matches_the_hand_computation_to_the_cent(prometheus: tuple[str, Path, Path]) -> None:
    doc = _service(*prometheus).window_costs("48h")
    assert doc.window.source == "prometheus" and doc.window.step_seconds == STEP
    assert {r.tenant: r.cost for r in doc.tenants} == EXPECTED_TENANTS
    assert doc.totals.cost == EXPECTED_TOTAL
    assert {r.tenant: r.gpu_hours for r in doc.tenants} == EXPECTED_GPU_HOURS
    assert {r.tenant: r.savings for r in doc.tenants} == EXPECTED_SAVINGS
    runs = {(r.kind, r.name): r for r in doc.runs}
    assert {k: r.cost for k, r in runs.items()} == EXPECTED_RUNS
    assert runs[("Job", "train")].pods == 2
    assert runs[("Job", "train")].started == stamp(NOW - 31 * 3600)
    assert runs[("Job", "train")].finished == stamp(NOW - 6 * 3600)
    workloads = {(r.namespace, r.kind, r.name): r.cost for r in doc.workloads}
    assert {k: workloads[k] for k in EXPECTED_WORKLOADS} == EXPECTED_WORKLOADS
    # GPUs held only through ResourceClaims of their own were exported and are charged like the rest: each
    # device at its type's price, a claim two pods name once, an unallocated claim not at all.
    pod_rows = {(r.namespace, r.pod): r for r in doc.pod_costs}
    assert {k: pod_rows[k].cost for k in EXPECTED_CLAIM_PODS} == {k: c for k, (_r, c) in EXPECTED_CLAIM_PODS.items()}
    mig = pod_rows[("inference", "claim-mig")]
    assert (mig.share, mig.savings) == ("mig", "12.80")
    assert pod_rows[("team-b", "claim-train")].finished is None
    assert ("team-b", SERVE[1]) not in pod_rows and ("team-b", "claim-unallocated") not in pod_rows
    # Spend over time: the hourly buckets add up to each tenant's cost.
    series = {s.tenant: s.costs for s in doc.spend_over_time.tenants}
    assert sum(Decimal(v) for v in series["team-a"]) == Decimal(EXPECTED_TENANTS["team-a"])
    # This month: edge-0's 12 hours before the window come from Prometheus too.
    month = {m.tenant: m for m in doc.month.tenants}
    assert month["team-a"].spent == "508.50"


def test_idle_cost_where_usage_is_known_and_unknown_elsewhere(prometheus: tuple[str, Path, Path]) -> None:
    doc = _service(*prometheus).window_costs("48h")
    tenants = {r.tenant: r for r in doc.tenants}
    assert tenants["inference"].idle_cost == "12.00"  # nb-mig idle its whole life
    assert tenants["team-a"].idle_cost == "0.00"  # train-0 busy; the rest of team-a unknown
    assert tenants["team-a"].idle_unknown_cost == "238.50"  # 454.50 - train-0's 216.00
    assert tenants["team-b"].idle_cost == "unknown"
    assert doc.totals.idle_cost == "12.00"
    assert doc.totals.idle_share == "0.0526"  # 12 / (12 + 216): of the cost whose usage is known
    # Directory mode with a Prometheus for usage: the same idle cost on the pods' own figures.
    directory_doc = _service(*prometheus, source="directory").window_costs("48h")
    assert directory_doc.window.source == "directory"
    assert {r.tenant: r.idle_cost for r in directory_doc.tenants} == {r.tenant: r.idle_cost for r in doc.tenants}


def test_cli_reads_the_prometheus_it_is_given(prometheus: tuple[str, Path, Path],
                                              capsys: pytest.CaptureFixture[str]) -> None:
    url, directory, config_file = prometheus
    assert main(["costs", "--cluster", str(directory), "--config", str(config_file), "--window", "48h",
                 "--prometheus", url, "--at", str(NOW), "-o", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["window"]["source"] == "prometheus"
    assert doc["totals"]["cost"] == EXPECTED_TOTAL
    assert main(["costs", "--cluster", str(directory), "--config", str(config_file), "--window", "48h",
                 "--prometheus", "http://127.0.0.1:9", "--at", str(NOW)]) == 2
    assert "did not answer" in capsys.readouterr().err
