"""Which accelerator types a pod may run on, before sharing and topology: the types asked for that this
cluster has (or all of its typed types), of the pod's GPU vendor, published by one backend, with enough
memory per GPU.

Each step narrows `ctx.candidates` and records what it dropped in the plan's trace.
"""

from __future__ import annotations

from policies.vocabulary.accelerator_types import UNKNOWN
from policies.vocabulary.quantities import GIB
from webhook.cluster.model import ClusterModel
from webhook.placement.context import PlanContext, describe_cluster, format_bytes
from webhook.placement.dra_planner import DRA_PLANNER
from webhook.placement.suggest import with_hints
from webhook.placement.trace import TraceStep, record, refusal_or
from webhook.placement.vendors import restrict_to_vendor


def cluster_types(ctx: PlanContext) -> bool:
    """The types asked for, in the user's order, that this cluster has; with none asked, every typed type.

    Asking only for types the cluster lacks is refused (with did-you-mean hints); asking for some is a
    warning naming those left out."""
    plan, model = ctx.plan, ctx.model
    present = model.type_ids()
    requested = ctx.requested
    if requested:
        missing = [t for t in requested if t not in model.types or t == UNKNOWN]
        candidates = [t for t in requested if t in model.types and t != UNKNOWN]
        plan.trace.append(TraceStep("requested", tuple(candidates), tuple((t, "no such GPUs in this cluster")
                                                                            for t in missing[:16])))
        if not candidates:
            named = with_hints(missing, present, model.table)
            plan.refusals.append(f"{named}: no such GPUs; this cluster has {describe_cluster(model)}")
            return False
        if missing:
            named = with_hints(missing, present, model.table)
            plan.warnings.append(f"{named}: not in this cluster; using {', '.join(candidates)}")
        plan.steps.append("accelerator")
    else:
        candidates = list(present)
        record(plan, "every GPU type", candidates, note="no type asked for: every typed GPU type of the cluster")
    ctx.candidates = candidates
    ctx.explicit_types = bool(requested)
    return True


def vendor(ctx: PlanContext) -> bool:
    """Only the types of the vendor whose GPU resources the pod asks for (webhook/placement/vendors.py)."""
    plan = ctx.plan
    ctx.candidates, refusal = restrict_to_vendor(ctx.pod, ctx.candidates, ctx.model.table, ctx.explicit_types)
    record(plan, "vendor", ctx.candidates, refusal_or(plan, "the pod's GPU resource is another vendor's"))
    if refusal:
        plan.refusals.append(refusal)
        return False
    return True


def backend(ctx: PlanContext) -> bool:
    """One backend (device plugin or DRA) per pod, that of its most preferred type; only for a pod that
    asks KGWE for something (a bare GPU request keeps every type)."""
    if ctx.explicit_types or not ctx.intent.empty or ctx.fields:
        ctx.candidates = DRA_PLANNER.value.choose_backend(ctx.plan, ctx.candidates, ctx.model, ctx.config)
        record(ctx.plan, "backend", ctx.candidates,
               "published another way (device plugin or DRA) than the preferred type")
    return True


def _memory_gib(type_id: str, model: ClusterModel) -> int | None:
    return model.table.memory_gb(type_id)


def gpu_memory(ctx: PlanContext) -> bool:
    """GPU memory per GPU: whole-GPU types must have at least `kgwe.io/gpu-memory` (MIG judges slices)."""
    asked = ctx.intent.gpu_memory_bytes
    if asked is None or ctx.sharing == "mig":
        return True
    plan, model, candidates = ctx.plan, ctx.model, ctx.candidates
    fitting = [t for t in candidates if (_memory_gib(t, model) or 0) * GIB >= asked]
    record(plan, "gpu-memory", fitting, lambda t: f"{_memory_gib(t, model) or 0} GiB per GPU, less than asked")
    if not fitting:
        plan.refusals.append(
            f"no GPU type with at least {format_bytes(asked)} per GPU among {', '.join(candidates) or 'none'}; "
            f"this cluster has {describe_cluster(model)}"
        )
        return False
    ctx.candidates = fitting
    plan.steps.append("gpu-memory")
    return True
