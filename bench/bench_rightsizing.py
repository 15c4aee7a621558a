"""Share of GPU-hours the recommendations free, against an oracle, on generated DCGM traces (issue 31).

    python bench/bench_rightsizing.py [--workloads 42] [--hours 36] [--pods 10000]

One run: generate a trace (bench/usage_traces.py), load it into a real Prometheus, recommend through the
same code as `kgwe recommend` against examples/cluster, and compare with the oracle: each workload on
the smallest shape of the cluster that holds its true peak (the trace's highest sample) plus the margin,
by memory alone and whatever its history. Then the pure part alone on `--pods` synthetic pods of one
day of 5-minute windows (the cost of a 10,000-pod cluster without Prometheus' share), and the same with
the recommendation maths as first written (bench/rightsizing_reference.py) as the in-run baseline.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from decimal import Decimal
from pathlib import Path
from unittest import mock

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

import rightsizing_reference as reference  # noqa: E402
from usage_traces import TraceWorkload, generate, openmetrics, prometheus_with  # noqa: E402

from webhook import assembly  # noqa: E402
from webhook.cluster.model import ClusterModel  # noqa: E402
from webhook.config import Config, load_config  # noqa: E402
from webhook.usage import views  # noqa: E402
from webhook.usage.history import PodHistory, UsageHistory  # noqa: E402
from webhook.usage.promql import Grid  # noqa: E402
from webhook.usage.service import UsageService  # noqa: E402
from webhook.usage.shapes import MIB_PER_GB, Need, Shape, cluster_shapes, fitting, smallest  # noqa: E402
from webhook.usage.views import UsageReport, build_report  # noqa: E402


def _oracle(workload: TraceWorkload, ask: Shape, shapes: list[Shape], margin: float) -> Shape:
    need = Need(workload.peak_mib * margin, max(workload.peak_total_mib, workload.peak_mib) * margin, 0.0, ask.gpus)
    best = smallest(fitting(shapes, need, {}, None))
    if best is None:
        return ask
    cheaper = (best.hourly < ask.hourly) if best.hourly is not None and ask.hourly is not None else False
    return best if cheaper or best.equivalents < ask.equivalents else ask


def run_trace(args: argparse.Namespace, config: Config, model: ClusterModel) -> list[tuple[str, str]]:
    end = float(int(time.time()) // 300 * 300)
    workloads = generate(args.seed, end, args.hours, workloads=args.workloads)
    text = openmetrics(workloads, args.seed, every=args.every)
    with prometheus_with(text) as url:
        started = time.perf_counter()
        report = UsageService(lambda: config, lambda: model, url).report(at=end)
        seconds = time.perf_counter() - started
    margin = 1 + config.rightsizing.memory_margin
    shapes = cluster_shapes(model, config)
    by_key = {w.key: w for w in workloads}
    recommended = {}
    for found in report.recommendations:
        ref = found.workload
        recommended.setdefault(f"{ref.kind}/{ref.namespace}/{ref.name}", []).append(found)
    held = freed = oracle = Decimal(0)
    unsafe = 0
    for key, workload in sorted(by_key.items()):
        for found in recommended.get(key, []):
            hours = Decimal(str(found.history_seconds / 3600)) * found.pods
            freed += found.equivalents_saved_per_pod * hours
            if found.change and found.recommended.memory_mib * max(1, found.recommended.gpus) < found.peak_mib:
                unsafe += 1
        pod_hours = Decimal(str(sum(p.end - p.start for p in workload.pods) / 3600))
        ask = _trace_ask(workload, config, model)
        held += ask.equivalents * pod_hours
        oracle += (ask.equivalents - _oracle(workload, ask, shapes, margin).equivalents) * pod_hours
    return [
        ("workloads (pods)", f"{len(workloads)} ({sum(len(w.pods) for w in workloads)})"),
        ("trace", f"{args.hours:g} h, one sample per GPU every {args.every:g} s"),
        ("recommendations (workloads, or their parts)", str(len(report.recommendations))),
        ("workloads waiting for history", str(len(report.without_history))),
        ("changes", str(sum(1 for r in report.recommendations if r.change))),
        ("recommendations below a peak seen", str(unsafe)),
        ("GPU-hours held", f"{held:.1f}"),
        ("GPU-hours freed by the recommendations", f"{freed:.1f} ({freed / held:.1%} of held)"),
        ("GPU-hours freed by the oracle", f"{oracle:.1f} ({oracle / held:.1%} of held)"),
        ("share of the oracle's saving", f"{freed / oracle:.1%}" if oracle else "-"),
        ("idle pods found", str(len(report.idle))),
        ("Prometheus queries", str(report.queries)),
        ("recommend (read + work out)", f"{seconds:.2f} s"),
    ]


def _trace_ask(workload: TraceWorkload, config: Config, model: ClusterModel) -> Shape:
    """What the trace's pods ask, as the exporter shows it: whole GPUs of their type."""
    memory = (model.table.memory_gb(workload.type_id) or 0) * MIB_PER_GB
    return Shape("gpu", workload.type_id, memory, 1.0, gpus=workload.gpus,
                 price=config.price_per_gpu_hour(workload.type_id))


def run_pure(pods: int, config: Config, model: ClusterModel, rounds: int = 2) -> list[tuple[str, str]]:
    """The work-out alone on `pods` synthetic pods (each its own workload, the costliest case), against the
    in-run baseline: the same pipeline with the recommendation and idle maths as first written
    (bench/rightsizing_reference.py), alternating, the faster of `rounds` each; their answers must agree."""
    rng = random.Random(1)
    grid = Grid.ending(1_800_000_000.0, 26 * 3600.0, 300.0)
    history = UsageHistory(grid)
    for index in range(pods):
        pod = PodHistory(f"ns-{index % 50}", f"app-{index // 4}-{index % 4}")
        pod.devices.models[("NVIDIA H100 80GB HBM3", "")] = 1
        base = rng.uniform(2000, 70000)
        for step in range(grid.points):
            moment = grid.start + step * grid.step
            pod.memory[moment] = base * rng.uniform(0.9, 1.1)
            pod.activity[moment] = rng.random() * 0.3
        history.pods[pod.key] = pod
    seconds: dict[str, list[float]] = {"fast": [], "baseline": []}
    reports: dict[str, UsageReport] = {}
    for _round in range(rounds):
        for name in ("baseline", "fast"):
            started = time.perf_counter()
            if name == "fast":
                reports[name] = build_report(history, model, config)
            else:
                with mock.patch.object(views, "recommend", reference.recommend), \
                        mock.patch.object(views, "idle_pod", reference.idle_pod):
                    reports[name] = build_report(history, model, config)
            seconds[name].append(time.perf_counter() - started)
    fast, baseline = reports["fast"], reports["baseline"]
    same = repr(fast.recommendations) == repr(baseline.recommendations) and fast.idle == baseline.idle
    best, base = min(seconds["fast"]), min(seconds["baseline"])
    return [
        (f"work out only, {pods} pods x {grid.points} windows ({len(fast.recommendations)} workloads)",
         f"{best:.2f} s"),
        ("the same, maths as first written (in-run baseline)",
         f"{base:.2f} s ({base / best:.1f}x the time; answers identical: {'yes' if same else 'NO'})"),
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", type=int, default=42)
    parser.add_argument("--hours", type=float, default=36.0)
    parser.add_argument("--every", type=float, default=120.0, help="seconds between samples of the trace")
    parser.add_argument("--seed", type=int, default=31)
    parser.add_argument("--pods", type=int, default=10_000, help="pods of the pure run (0: skip it)")
    args = parser.parse_args(argv)
    config = load_config(ROOT / "examples" / "config.yaml")
    model = assembly.from_directory(config, ROOT / "examples" / "cluster").runtime.store.snapshot()
    rows = run_trace(args, config, model)
    if args.pods:
        rows.extend(run_pure(args.pods, config, model))
    width = max(len(k) for k, _ in rows)
    print(f"| {'measure'.ljust(width)} | value |\n| {'-' * width} | --- |")
    for key, value in rows:
        print(f"| {key.ljust(width)} | {value} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
