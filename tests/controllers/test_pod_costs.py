"""Hourly cost of a pod's GPU share (webhook/costs.py) on the example cluster."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from webhook.cluster.model import ClusterModel, ClusterStore
from webhook.cluster.yaml_source import YamlDirectorySource
from webhook.config import Config, load_config
from webhook.costs import format_hourly_cost, parse_hourly_cost, pod_hourly_cost

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.fixture(scope="module")
def config() -> Config:
    return load_config(EXAMPLES / "config.yaml")


@pytest.fixture(scope="module")
def model(config: Config) -> ClusterModel:
    store = ClusterStore(config.accelerator_table())
    YamlDirectorySource(EXAMPLES / "cluster", store).load()
    return store.snapshot(force=True)


def gpu_pod(resources: dict[str, str], annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "p", "namespace": "team-a", "annotations": annotations or {}},
        "spec": {"containers": [{"name": "main", "resources": {"limits": resources}}]},
    }


@pytest.mark.parametrize(("value", "text"), [
    (Decimal("4.50"), "4.5"),
    (Decimal("4.5") / 7, "0.6429"),
    (Decimal("18.00"), "18"),
    (Decimal("0"), "0"),
    (Decimal("0.00005"), "0.0001"),
    (Decimal("0.00004"), "0"),
    (Decimal("2.8") / 7, "0.4"),
    (Decimal("1234.56785"), "1234.5679"),
])
def test_format_rounds_half_up_to_four_decimals_and_trims(value, text):
    assert format_hourly_cost(value) == text
    assert "E" not in format_hourly_cost(value * Decimal("1E-10"))


def test_parse_accepts_decimals_only():
    assert parse_hourly_cost("18.00") == Decimal(18)
    assert parse_hourly_cost("-1") is None
    assert parse_hourly_cost("NaN") is None
    assert parse_hourly_cost("cheap") is None
    assert parse_hourly_cost(None) is None


def test_whole_gpus_on_an_exclusive_node(model, config):
    facts = model.nodes["dgx-h100-01"]
    cost = pod_hourly_cost(gpu_pod({"nvidia.com/gpu": "4"}), facts, "nvidia-h100-80gb", model, config)
    assert cost == Decimal("18.00")


def test_mig_slice_is_its_compute_slices_over_seven(model, config):
    facts = model.nodes["hgx-a100-mig-01"]
    one = pod_hourly_cost(gpu_pod({"nvidia.com/mig-1g.10gb": "1"}), facts, "nvidia-a100-80gb", model, config)
    three = pod_hourly_cost(gpu_pod({"nvidia.com/mig-3g.40gb": "2"}), facts, "nvidia-a100-80gb", model, config)
    assert one is not None and format_hourly_cost(one) == "0.4"
    assert three is not None and format_hourly_cost(three) == format_hourly_cost(Decimal("2.80") * 6 / 7)


def test_mps_share_is_the_fraction_else_one_over_replicas(model, config):
    facts = model.nodes["l4-mps-01"]  # 4 replicas per GPU, 0.80 per GPU-hour
    half = gpu_pod({"nvidia.com/gpu": "1"}, {"kgwe.io/gpu-fraction": "0.5"})
    plain = gpu_pod({"nvidia.com/gpu": "1"})
    assert pod_hourly_cost(half, facts, "nvidia-l4-24gb", model, config) == Decimal("0.40")
    assert pod_hourly_cost(plain, facts, "nvidia-l4-24gb", model, config) == Decimal("0.20")


def test_time_sliced_replica_is_one_over_replicas(config):
    store = ClusterStore(config.accelerator_table())
    store.upsert({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "l4-ts", "labels": {
        "nvidia.com/gpu.product": "NVIDIA-L4-SHARED", "nvidia.com/gpu.count": "1", "nvidia.com/gpu.replicas": "3",
        "nvidia.com/gpu.sharing-strategy": "time-slicing"}}, "status": {"allocatable": {"nvidia.com/gpu": "3"}}})
    model = store.snapshot(force=True)
    cost = pod_hourly_cost(gpu_pod({"nvidia.com/gpu": "1"}), model.nodes["l4-ts"], "nvidia-l4-24gb", model, config)
    assert cost is not None and format_hourly_cost(cost) == "0.2667"
    # Before binding the type's time-slicing nodes stand in for the node.
    pending = gpu_pod({"nvidia.com/gpu": "1"}, {"kgwe.io/sharing": "time-slicing"})
    assert pod_hourly_cost(pending, None, "nvidia-l4-24gb", model, config) == cost


def test_profile_price_overrides_the_pricing_config_for_its_types(model):
    config = Config.model_validate({"pricing": {"perGPUHour": {"nvidia-h100-80gb": "4.00"}}})
    facts = model.nodes["dgx-h100-01"]
    with_profile = gpu_pod({"nvidia.com/gpu": "2"}, {"kgwe.io/profile": "premium-h100"})
    assert pod_hourly_cost(with_profile, facts, "nvidia-h100-80gb", model, config) == Decimal("9.00")
    # A profile for another type does not price this one.
    other = gpu_pod({"nvidia.com/gpu": "2"}, {"kgwe.io/profile": "shared-l4"})
    assert pod_hourly_cost(other, facts, "nvidia-h100-80gb", model, config) == Decimal("8.00")


def test_profile_fraction_prices_an_mps_pod_before_binding(model, config):
    pod = gpu_pod({"nvidia.com/gpu": "1"}, {"kgwe.io/profile": "shared-l4"})
    assert pod_hourly_cost(pod, None, "nvidia-l4-24gb", model, config) == Decimal("0.20")
    # The pod's own fraction wins over the profile's.
    pod["metadata"]["annotations"]["kgwe.io/gpu-fraction"] = "0.5"
    assert pod_hourly_cost(pod, None, "nvidia-l4-24gb", model, config) == Decimal("0.40")


def test_unknown_price_is_none(model, config):
    facts = model.nodes["dgx-h100-01"]
    assert pod_hourly_cost(gpu_pod({"nvidia.com/gpu": "1"}), facts, "nvidia-t4-16gb", model, config) is None
