"""What a pod costs: its GPU-equivalents (slices and shares count as parts of a GPU) times the hourly
price of the most expensive type it may land on, which is also the type it is charged as until bound.

Prices come from the pod's HardwareProfile (`pricePerGPUHour`) or the configuration's price table.
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from policies.gpu_demand import gpu_equivalents
from webhook.cluster.model import ClusterModel
from webhook.config import Config
from webhook.placement.context import PlanContext, decimal_or_none
from webhook.placement.mig import mig_demand


def price(type_id: str, profile_spec: Mapping[str, Any] | None, config: Config) -> Decimal | None:
    """The hourly price of one GPU of `type_id`: the profile's when it sets one, else the configuration's."""
    if profile_spec is not None and profile_spec.get("pricePerGPUHour") is not None:
        return decimal_or_none(profile_spec.get("pricePerGPUHour"))
    return config.price_per_gpu_hour(type_id)


def replicas(model: ClusterModel, types: list[str], sharing: str) -> int:
    """How many pods share one GPU under MPS or time-slicing (the first shared node's replica count)."""
    if sharing not in ("mps", "time-slicing"):
        return 1
    for type_id in types:
        nodes = model.types[type_id].mps_nodes if sharing == "mps" else model.types[type_id].timeslice_nodes
        if nodes:
            return model.nodes[nodes[0]].replicas
    return 1


def cost(ctx: PlanContext) -> bool:
    """The cost step: GPU-equivalents, the charge type and its price; always the last step."""
    plan, candidates, demand = ctx.plan, ctx.candidates, ctx.demand
    plan.gpu_equivalents = gpu_equivalents(
        demand if plan.sharing != "mig" else mig_demand(demand, plan),
        plan.sharing,
        plan.gpu_fraction,
        replicas(ctx.model, candidates, plan.sharing),
    )
    prices = [(type_id, price(type_id, ctx.profile_spec, ctx.config)) for type_id in candidates]
    priced = [(type_id, amount) for type_id, amount in prices if amount is not None]
    if priced:
        plan.charge_type, plan.price_per_gpu_hour = max(priced, key=lambda item: item[1])
    elif candidates:
        plan.charge_type = candidates[0]
    if demand.asks_gpu:
        plan.steps.append("cost")
    return True
