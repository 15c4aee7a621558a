"""Where NVLink affinity is decided: `kgwe.io/topology: nvlink` keeps every GPU of a pod in one NVLink
domain.

A type qualifies when its largest NVLink domain (webhook/cluster/nvlink_domain.py infers each node's)
holds the pod's GPUs. Nodes are then selected by the agent's `kgwe.io/nvlink-domain-size` label, or, on
clusters without the agent, by the type alone when every node of it qualifies. MIG slices never use
NVLink, and a pod of one GPU has nothing to keep together. The built-in policy rule that asks for NVLink
is in rego/placement/.
"""

from __future__ import annotations

from policies.vocabulary.topology_schema import LABEL_NVLINK_DOMAIN_SIZE
from webhook.cluster.model import ClusterModel
from webhook.placement.constraints import Requirement
from webhook.placement.context import PlacementPlan, PlanContext
from webhook.placement.trace import record

# Nodes sampled per type to judge whether the domain-size label is published (bounded per request).
LABEL_SAMPLE = 20


def nvlink(ctx: PlanContext) -> bool:
    """The NVLink step: for `kgwe.io/topology: nvlink`, keep the types with a domain as big as the pod."""
    if ctx.topology != "nvlink":
        return True
    plan, model = ctx.plan, ctx.model
    whole_gpus = ctx.demand.whole_gpus
    if plan.sharing == "mig":
        plan.warnings.append("kgwe.io/topology nvlink ignored: MIG slices cannot use NVLink")
    elif whole_gpus > 1:
        if not plan_nvlink(plan, ctx.candidates, whole_gpus, model):
            record(plan, "nvlink", [], lambda t: f"largest NVLink domain has {model.types[t].max_nvlink_domain} "
                   f"GPUs, the pod asks for {whole_gpus}")
            return False
        record(plan, "nvlink", plan.types, lambda t: f"no node of this type has a {whole_gpus}-GPU NVLink domain "
               f"(largest {model.types[t].max_nvlink_domain})")
        ctx.candidates = plan.types
    else:
        plan.notes.append("nvlink: one GPU or fewer, nothing to keep together")
    return True


def plan_nvlink(plan: PlacementPlan, candidates: list[str], gpus: int, model: ClusterModel) -> bool:
    """Write the NVLink part of the plan for `gpus` GPUs; False (with a refusal) when no type can."""
    qualifying = [t for t in candidates if model.types[t].max_nvlink_domain >= gpus]
    if not qualifying:
        best = max((model.types[t].max_nvlink_domain for t in candidates), default=0)
        plan.refusals.append(
            f"kgwe.io/topology nvlink: this pod asks for {gpus} GPUs in one NVLink domain; the largest "
            f"{'/'.join(candidates) or 'GPU'} NVLink domain has {best}"
        )
        return False
    labelled = all(
        all(LABEL_NVLINK_DOMAIN_SIZE in model.nodes[n].labels for n in model.types[t].nodes[:LABEL_SAMPLE])
        for t in qualifying
    )
    whole = [t for t in qualifying if min(model.types[t].nvlink_domains) >= gpus]
    if labelled:
        plan.requirements.append(Requirement(LABEL_NVLINK_DOMAIN_SIZE, "Gt", (str(gpus - 1),)))
    elif whole:
        qualifying = whole  # every node of these types qualifies: the type selector is enough
    else:
        plan.refusals.append(
            f"kgwe.io/topology nvlink: nodes with {gpus}-GPU NVLink domains carry no {LABEL_NVLINK_DOMAIN_SIZE} "
            "label (is the KGWE agent running?)"
        )
        return False
    plan.types = qualifying
    plan.nvlink = True
    plan.steps.append("nvlink")
    return True
