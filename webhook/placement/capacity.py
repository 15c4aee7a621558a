"""Whole GPUs per pod: a pod runs on one node, so a type whose largest node has fewer physical GPUs than
the pod asks for is dropped (MIG pods are judged by slices in webhook/placement/mig.py)."""

from __future__ import annotations

from webhook.cluster.type_index import TypeSummary
from webhook.placement.context import PlanContext
from webhook.placement.trace import record


def gpu_capacity(summary: TypeSummary, sharing: str) -> int:
    """The most GPUs one node of this type can give a pod shared this way (exclusive nodes for an
    exclusive pod when the type has any)."""
    if sharing in ("mps", "time-slicing"):
        return summary.max_gpus_per_node
    return max(summary.max_gpus_exclusive_node, 0) if summary.exclusive_nodes else summary.max_gpus_per_node


def gpus_per_node(ctx: PlanContext) -> bool:
    """Keep the types with a node holding every whole GPU the pod asks for; refuse when none has."""
    plan, model, candidates = ctx.plan, ctx.model, ctx.candidates
    whole_gpus = ctx.demand.whole_gpus
    if not whole_gpus or plan.sharing == "mig":
        return True
    capacity = {t: gpu_capacity(model.types[t], plan.sharing) for t in candidates}
    fitting = [t for t in candidates if capacity[t] >= whole_gpus]
    record(plan, "gpus per node", fitting, lambda t: f"at most {capacity[t]} GPUs on one node, the pod asks for "
           f"{whole_gpus}")
    if not fitting:
        most = max(candidates, key=lambda t: capacity[t]) if candidates else None
        detail = f"the most any {'/'.join(candidates)} node has is {capacity[most]}" if most else "no GPU node"
        plan.refusals.append(f"this pod asks for {whole_gpus} GPUs on one node; {detail}")
        return False
    ctx.candidates = fitting
    return True
