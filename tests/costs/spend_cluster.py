"""A test cluster with known pods, prices and lifetimes, and its costs computed by hand (docs/costs.md).

`NOW` is an hour boundary at least 72 hours into its month (so every pod's life lies in that month), close
to the real clock (a Prometheus loaded with the recorded series keeps them). Prices: H100 4.50, A100-80GB
2.80, L4 0.80 per GPU-hour. The window asked is 48h ending at NOW. By hand, pod by pod (hours in the window
x rate per hour):

| pod | how it holds GPUs | rate/h | ran (in the window) | cost | as whole GPUs | saving |
| --- | --- | --- | --- | --- | --- | --- |
| team-a/train-1 (Job train, failed, retried) | 2 whole H100 | 9.00 | NOW-31h..NOW-30h: 1h | 9.00 | | |
| team-a/train-0 (Job train, the retry) | 2 whole H100 | 9.00 | NOW-30h..NOW-6h: 24h | 216.00 | | |
| team-a/edge-0 (Deployment, from NOW-60h) | 1 whole H100 | 4.50 | NOW-48h..NOW (window edge): 48h | 216.00 | | |
| team-a/ft-master-0, -worker-0 (PyTorchJob ft) | 1 H100 each | 4.50 each | NOW-10h..NOW-8h30m: 1.5h | 6.75 each | | |
| inference/nb-mig | MIG 3g.40gb on A100 | 1.20 | NOW-20h..NOW-10h: 10h | 12.00 | 28.00 | 16.00 |
| inference/mps-0 | MPS 0.25 of an L4 | 0.20 | NOW-12h..NOW-6h30m: 5.5h | 1.10 | 4.40 | 3.30 |
| inference/mps-1 | MPS 0.35 of an L4 | 0.28 | NOW-2h..NOW-1h53m: 7 min | 0.0326666... | 0.0933333... | 0.0606666... |
| inference/ts-0 (running) | time-sliced L4, 4 replicas | 0.20 | NOW-7h15m..NOW: 7.25h | 1.45 | 5.80 | 4.35 |
| team-b/dra-0 | 2 H100 through KGWE's DRA claim | 9.00 | NOW-3h..NOW-1h: 2h | 18.00 | | |
| team-a/waiting | never bound | - | - | 0 | | |

Tenants: team-a 9 + 216 + 216 + 13.50 = 454.50; inference 14.5826666... = 14.58; team-b 18.00;
total 487.0826666... = 487.08 (one rounding: the rows 454.50 + 14.58 + 18.00 = 487.08 too).
Runs: Job train 225.00 (both attempts, each charged once for its own life), PyTorchJob ft 13.50.
GPU-hours: team-a 2 + 48 + 48 + 1.5 + 1.5 = 101; inference 10 x 3/7 + 5.5 x 0.25 + 7/60 x 0.35 + 7.25 x 0.25
= 4.2857... + 1.375 + 0.04083... + 1.8125 = 7.51; team-b 4.
This month up to NOW: the same plus edge-0's 12 hours before the window (54.00): team-a 508.50; the rate now
is edge-0's 4.50 (team-a) and ts-0's 0.20 (inference).
"""

from __future__ import annotations

import json
import math
import time
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import yaml

HOUR = 3600
MINUTE = 60


def month_start(moment: float) -> float:
    at = datetime.fromtimestamp(moment, UTC)
    return datetime(at.year, at.month, 1, tzinfo=UTC).timestamp()


def pick_now(real: float | None = None) -> float:
    """An hour boundary two hours back, moved into the previous month when this one is under 3 days old."""
    now = math.floor((real if real is not None else time.time()) / HOUR) * HOUR - 2 * HOUR
    if now - month_start(now) < 72 * HOUR:
        now = month_start(now) - 12 * HOUR
    return now


def stamp(moment: float) -> str:
    return datetime.fromtimestamp(moment, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _node(name: str, product: str, allocatable: dict[str, str], **labels: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, "nvidia.com/gpu.present": "true",
                                              "nvidia.com/gpu.product": product, **labels}},
        "status": {"allocatable": {"cpu": "64", "memory": "512Gi", "pods": "110", **allocatable},
                   "capacity": {"cpu": "64", "memory": "512Gi", "pods": "110", **allocatable}},
    }


NODES = [
    _node("h100-a", "NVIDIA-H100-80GB-HBM3", {"nvidia.com/gpu": "8"}, **{
        "nvidia.com/gpu.count": "8", "nvidia.com/gpu.memory": "81559"}),
    _node("a100-mig", "NVIDIA-A100-SXM4-80GB", {"nvidia.com/gpu": "0", "nvidia.com/mig-3g.40gb": "4"}, **{
        "nvidia.com/gpu.count": "2", "nvidia.com/gpu.memory": "81920", "nvidia.com/mig.strategy": "mixed"}),
    _node("l4-mps", "NVIDIA-L4-SHARED", {"nvidia.com/gpu": "8"}, **{
        "nvidia.com/gpu.count": "2", "nvidia.com/gpu.memory": "23034", "nvidia.com/gpu.replicas": "4",
        "nvidia.com/gpu.sharing-strategy": "mps"}),
    _node("l4-ts", "NVIDIA-L4-SHARED", {"nvidia.com/gpu": "8"}, **{
        "nvidia.com/gpu.count": "2", "nvidia.com/gpu.memory": "23034", "nvidia.com/gpu.replicas": "4",
        "nvidia.com/gpu.sharing-strategy": "time-slicing"}),
]

CONFIG = {
    "pricing": {"currency": "USD", "perGPUHour": {
        "nvidia-h100-80gb": "4.50", "nvidia-a100-80gb": "2.80", "nvidia-l4-24gb": "0.80"}},
}


def namespaces() -> list[dict[str, Any]]:
    return [{"apiVersion": "v1", "kind": "Namespace",
             "metadata": {"name": n, "labels": {"kubernetes.io/metadata.name": n, "kgwe.io/tenant": n}}}
            for n in ("team-a", "team-b", "inference")]


def quotas(budget: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    team_a: dict[str, Any] = {"tenant": "team-a", "namespaces": ["team-a"],
                              "limits": [{"acceleratorType": "nvidia-h100-80gb", "gpus": 16}]}
    if budget is not None:
        team_a["budget"] = budget
    return [
        {"apiVersion": "kgwe.io/v1alpha1", "kind": "TenantQuota", "metadata": {"name": "team-a"}, "spec": team_a},
        {"apiVersion": "kgwe.io/v1alpha1", "kind": "TenantQuota", "metadata": {"name": "team-b"},
         "spec": {"tenant": "team-b", "namespaces": ["team-b"],
                  "limits": [{"acceleratorType": "nvidia-h100-80gb", "gpus": 16}]}},
    ]


def _pod(namespace: str, name: str, node: str | None, limits: dict[str, str], start: float | None,
         end: float | None, *, annotations: dict[str, str] | None = None, labels: dict[str, str] | None = None,
         owner: tuple[str, str] | None = None, phase: str | None = None,
         container: dict[str, Any] | None = None, extra_spec: dict[str, Any] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [container or {"name": "main", "image": "cuda",
                                                       "resources": {"limits": dict(limits)}}]}
    if node:
        spec["nodeName"] = node
    spec.update(extra_spec or {})
    metadata: dict[str, Any] = {"name": name, "namespace": namespace, "uid": f"uid-{namespace}-{name}",
                                "annotations": dict(annotations or {}), "labels": dict(labels or {})}
    if owner is not None:
        metadata["ownerReferences"] = [{"apiVersion": "v1", "kind": owner[0], "name": owner[1], "controller": True,
                                        "uid": f"uid-{owner[1]}"}]
    status: dict[str, Any] = {"phase": phase or ("Succeeded" if end is not None else
                                                 ("Running" if node else "Pending"))}
    if start is not None:
        metadata["creationTimestamp"] = stamp(start - 30)
        status["startTime"] = stamp(start)
    if end is not None:
        status["containerStatuses"] = [{"name": "main", "state": {"terminated": {
            "exitCode": 0, "startedAt": stamp(start or end), "finishedAt": stamp(end)}}}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec, "status": status}


def pods(now: float) -> list[dict[str, Any]]:
    h = HOUR
    gpu2 = {"nvidia.com/gpu": "2"}
    gpu1 = {"nvidia.com/gpu": "1"}
    dra_container = {"name": "main", "image": "cuda", "resources": {"claims": [{"name": "kgwe-gpu"}]}}
    return [
        _pod("team-a", "train-1", "h100-a", gpu2, now - 31 * h, now - 30 * h, owner=("Job", "train"), phase="Failed"),
        _pod("team-a", "train-0", "h100-a", gpu2, now - 30 * h, now - 6 * h, owner=("Job", "train")),
        _pod("team-a", "edge-0-7d9f8c6b5d-x2k4p", "h100-a", gpu1, now - 60 * h, None,
             owner=("ReplicaSet", "edge-0-7d9f8c6b5d"), labels={"pod-template-hash": "7d9f8c6b5d"}),
        _pod("team-a", "ft-master-0", "h100-a", gpu1, now - 10 * h, now - 8.5 * h,
             labels={"training.kubeflow.org/job-name": "ft", "training.kubeflow.org/replica-type": "master"}),
        _pod("team-a", "ft-worker-0", "h100-a", gpu1, now - 10 * h, now - 8.5 * h,
             labels={"training.kubeflow.org/job-name": "ft", "training.kubeflow.org/replica-type": "worker"}),
        _pod("team-a", "waiting", None, gpu1, None, None, extra_spec={"schedulingGates": [{"name": "kgwe.io/quota"}]},
             annotations={"kgwe.io/tenant": "team-a", "kgwe.io/accelerator-type": "nvidia-h100-80gb"}),
        _pod("inference", "nb-mig", "a100-mig", {"nvidia.com/mig-3g.40gb": "1"}, now - 20 * h, now - 10 * h),
        _pod("inference", "mps-0", "l4-mps", gpu1, now - 12 * h, now - 6.5 * h,
             annotations={"kgwe.io/gpu-fraction": "0.25"}),
        _pod("inference", "mps-1", "l4-mps", gpu1, now - 2 * h, now - 2 * h + 7 * MINUTE,
             annotations={"kgwe.io/gpu-fraction": "0.35"}),
        _pod("inference", "ts-0", "l4-ts", gpu1, now - 7.25 * h, None),
        _pod("team-b", "dra-0", "h100-a", {}, now - 3 * h, now - 1 * h, container=dra_container,
             annotations={"kgwe.io/dra-claims": json.dumps({"main": {"nvidia.com/gpu": "2"}})},
             extra_spec={"resourceClaims": [{"name": "kgwe-gpu", "resourceClaimTemplateName": "kgwe-dra-0"}]}),
    ]


def write_cluster(root: Path, now: float, budget: dict[str, Any] | None = None) -> tuple[Path, Path]:
    """The cluster directory and the configuration file; returns (cluster dir, config file)."""
    cluster = root / "cluster"
    cluster.mkdir(parents=True, exist_ok=True)
    for name, docs in (("nodes.yaml", NODES), ("namespaces.yaml", namespaces()), ("quotas.yaml", quotas(budget)),
                       ("pods.yaml", pods(now))):
        (cluster / name).write_text(yaml.safe_dump_all(docs, sort_keys=False), encoding="utf-8")
    config = root / "config.yaml"
    config.write_text(yaml.safe_dump(CONFIG), encoding="utf-8")
    return cluster, config


# The hand computation above, to the cent.
EXPECTED_TENANTS = {"team-a": "454.50", "inference": "14.58", "team-b": "18.00"}
EXPECTED_TOTAL = "487.08"
EXPECTED_GPU_HOURS = {"team-a": "101.00", "inference": "7.51", "team-b": "4.00"}
EXPECTED_SAVINGS = {"team-a": "0.00", "inference": "23.71", "team-b": "0.00"}  # 16 + 3.30 + 0.0606... + 4.35
EXPECTED_RUNS = {("Job", "train"): "225.00", ("PyTorchJob", "ft"): "13.50"}
EXPECTED_WORKLOADS = {("team-a", "Deployment", "edge-0"): "216.00", ("team-a", "Job", "train"): "225.00",
                      ("team-a", "PyTorchJob", "ft"): "13.50", ("inference", "Pod", "nb-mig"): "12.00",
                      ("team-b", "Pod", "dra-0"): "18.00"}
EXPECTED_MONTH_SPENT = {"team-a": Decimal("508.50"), "inference": Decimal("14.5826666666666666666666667"),
                        "team-b": Decimal("18.00")}
EXPECTED_RATE = {"team-a": Decimal("4.50"), "inference": Decimal("0.20")}
