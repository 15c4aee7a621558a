"""KGWE's per-pod cost series: one per GPU container of each bound pod, labelled as OpenCost labels its
allocations (namespace, pod, container, node) plus tenant, type, share kind, workload and run."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

from prometheus_client import CollectorRegistry

from webhook.cluster.model import ClusterStore
from webhook.cluster.yaml_source import YamlDirectorySource
from webhook.config import load_config
from webhook.controllers.bound_pods import HourlyCostCollector, cost_series

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _pod(name: str, cost: str, phase: str = "Running", node: str | None = "hgx-a100-mig-01",
         containers: int = 1) -> dict:
    spec: dict = {"containers": [
        {"name": f"c{i}", "resources": {"limits": {"nvidia.com/mig-1g.10gb": "1"}}} for i in range(containers)]}
    if node:
        spec["nodeName"] = node
    return {
        "metadata": {"namespace": "inference", "name": name, "annotations": {
            "kgwe.io/hourly-cost": cost, "kgwe.io/tenant": "inf", "kgwe.io/accelerator-type": "nvidia-a100-80gb"},
            "ownerReferences": [{"kind": "Job", "name": "batch", "controller": True}]},
        "spec": spec,
        "status": {"phase": phase},
    }


def test_one_series_per_container_with_opencost_labels_and_only_pods_holding_gpus() -> None:
    config = load_config(EXAMPLES / "config.yaml")
    store = ClusterStore(config.accelerator_table(), min_rebuild_interval=0.0)
    YamlDirectorySource(EXAMPLES / "cluster", store).load()
    model = store.snapshot()
    pods = [_pod("nb-1", "0.4"), _pod("nb-2", "0.8", containers=2), _pod("done", "9", "Succeeded"),
            _pod("waiting", "0.4", "Pending", node=None)]
    series = cost_series(pods, model, config)
    by_pod = {(k[1], k[2]): v for k, v in series.items()}
    assert set(by_pod) == {("nb-1", "c0"), ("nb-2", "c0"), ("nb-2", "c1")}
    assert by_pod[("nb-1", "c0")].hourly == Decimal("0.4")
    # Two containers of one slice each: the pod's cost split by the GPUs each asks.
    assert by_pod[("nb-2", "c0")].hourly + by_pod[("nb-2", "c1")].hourly == Decimal("0.8")
    key = next(k for k in series if k[1] == "nb-1")
    labels = dict(zip(["namespace", "pod", "container", "node", "tenant", "accelerator_type", "share",
                       "workload_kind", "workload", "run_kind", "run"], key, strict=True))
    assert labels == {"namespace": "inference", "pod": "nb-1", "container": "c0", "node": "hgx-a100-mig-01",
                      "tenant": "inf", "accelerator_type": "nvidia-a100-80gb", "share": "mig",
                      "workload_kind": "Job", "workload": "batch", "run_kind": "Job", "run": "batch"}
    # A 1g.10gb slice is 1/7 of an A100 at 2.80: whole, it would cost one GPU.
    assert series[key].allocation == Decimal(1) / 7
    assert series[key].whole == Decimal("2.80")

    registry = CollectorRegistry()
    collector = HourlyCostCollector()
    registry.register(collector)
    collector.update(series)
    assert registry.get_sample_value("kgwe_pod_hourly_cost", labels) == 0.4
    assert registry.get_sample_value("kgwe_pod_whole_gpu_hourly_cost", labels) == 2.8
    assert abs(registry.get_sample_value("kgwe_pod_gpu_allocation", labels) - 1 / 7) < 1e-12
