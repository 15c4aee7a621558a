"""`kgwe_pod_hourly_cost` has one series per pod (namespace, pod, tenant, type): what FinOps tools join on."""

from __future__ import annotations

from decimal import Decimal

from prometheus_client import CollectorRegistry

from webhook.controllers.bound_pods import HourlyCostCollector, hourly_cost_by_labels


def _pod(name: str, cost: str, phase: str = "Running") -> dict:
    return {
        "metadata": {"namespace": "inference", "name": name, "annotations": {
            "kgwe.io/hourly-cost": cost, "kgwe.io/tenant": "inf", "kgwe.io/accelerator-type": "nvidia-a100-80gb"}},
        "status": {"phase": phase},
    }


def test_one_series_per_pod_with_its_mig_price() -> None:
    totals = hourly_cost_by_labels([_pod("nb-1", "0.4"), _pod("nb-2", "1.2"), _pod("done", "9", "Succeeded")])
    assert totals == {
        ("inference", "nb-1", "inf", "nvidia-a100-80gb"): Decimal("0.4"),
        ("inference", "nb-2", "inf", "nvidia-a100-80gb"): Decimal("1.2"),
    }
    registry = CollectorRegistry()
    collector = HourlyCostCollector()
    registry.register(collector)
    collector.update(totals)
    labels = {"namespace": "inference", "pod": "nb-1", "tenant": "inf", "accelerator_type": "nvidia-a100-80gb"}
    assert registry.get_sample_value("kgwe_pod_hourly_cost", labels) == 0.4
