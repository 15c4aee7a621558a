"""How the chosen types become node constraints: the type labels that select their nodes (OR-ed when
the types carry different label keys), a preference for the user's order, the GPU taints tolerated, the
profile's extra node selector, and the requirements merged into one consistent set.

A pod with any KGWE intent (or named types) runs on typed GPU nodes only, with their GPU taints
tolerated; a bare GPU request is left to the scheduler (no selector, no toleration).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from webhook.cluster.type_index import TypeSummary
from webhook.placement.constraints import Requirement, merge
from webhook.placement.context import PlanContext
from webhook.placement.trace import record


def selector_requirements(summaries: list[TypeSummary]) -> tuple[list[list[Requirement]], list[str]]:
    """Requirements selecting exactly the given types' nodes, as OR-ed alternatives (one per label key),
    and the types whose nodes share no label to select them by."""
    by_key: dict[str, list[str]] = {}
    unselectable = []
    for summary in summaries:
        selector = summary.selector()
        if selector is None:
            unselectable.append(summary.type_id)
            continue
        key, values = selector
        by_key.setdefault(key, [])
        by_key[key].extend(v for v in values if v not in by_key[key])
    alternatives = [[Requirement(key, "In", tuple(values))] for key, values in by_key.items()]
    return alternatives, unselectable


def preference_weights(count: int) -> list[int]:
    """Weights 100 down to about 100/count, for `count` types in the user's order."""
    return [max(1, round(100 * (count - i) / count)) for i in range(count)]


def type_selectors(ctx: PlanContext) -> bool:
    """Select the candidate types' nodes by label (DRA pods: the claim's CEL selects them instead), and
    prefer them in the order the user named them."""
    plan, model = ctx.plan, ctx.model
    plan.types = ctx.candidates
    ctx.narrowed = ctx.explicit_types or bool(plan.steps) or not ctx.intent.empty
    if not (ctx.narrowed and ctx.candidates):
        return True
    ctx.selected = [model.types[t] for t in ctx.candidates]
    # DRA: the claim's CEL selectors pick the type (and its order); no node label is needed.
    dra = plan.backend == "dra"
    alternatives, unselectable = selector_requirements(ctx.selected) if not dra else ([], [])
    if unselectable:
        plan.warnings.append(f"{', '.join(unselectable)}: nodes carry no common type label; not selected")
        ctx.candidates = [t for t in ctx.candidates if t not in unselectable]
        plan.types = ctx.candidates
        record(plan, "selectable", ctx.candidates, "its nodes carry no common type label to select them by")
    if not alternatives and not dra:
        plan.refusals.append(f"{', '.join(unselectable)}: its nodes cannot be selected by label")
        return False
    if len(alternatives) == 1:
        plan.requirements[:0] = alternatives[0]
    else:
        plan.type_alternatives = alternatives
    candidates = ctx.candidates
    if len(candidates) > 1 and ctx.explicit_types and not dra:
        for weight, type_id in zip(preference_weights(len(candidates)), candidates, strict=True):
            selector = model.types[type_id].selector()
            if selector:
                plan.preferences.append((weight, Requirement(selector[0], "In", tuple(selector[1]))))
    if "accelerator" not in plan.steps:
        plan.steps.insert(0, "accelerator")
    return True


def tolerations(ctx: PlanContext) -> bool:
    """Tolerate the GPU taints of the selected types' nodes, and the profile's tolerations."""
    if ctx.selected:
        ctx.plan.tolerations = gpu_tolerations(ctx.selected, ctx.profile_spec)
    return True


def gpu_tolerations(summaries: list[TypeSummary], profile_spec: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    """One `Exists` toleration per GPU taint key and effect of these types, then the profile's own."""
    out: list[dict[str, Any]] = []
    taints = sorted({t for s in summaries for t in s.gpu_taints}, key=lambda t: (t.key, t.value or "", t.effect))
    for taint in taints:
        toleration: dict[str, Any] = {"key": taint.key, "operator": "Exists", "effect": taint.effect}
        if toleration not in out:
            out.append(toleration)
    for toleration in (profile_spec or {}).get("tolerations") or []:
        if isinstance(toleration, dict) and toleration not in out:
            out.append(dict(toleration))
    return out


def profile_node_selector(ctx: PlanContext) -> bool:
    """The HardwareProfile's `nodeSelector`, as required node labels of a pod KGWE places."""
    spec = ctx.profile_spec
    if ctx.selected and spec and spec.get("nodeSelector"):
        for key, value in spec["nodeSelector"].items():
            ctx.plan.requirements.append(Requirement(str(key), "In", (str(value),)))
    return True


def merged_requirements(ctx: PlanContext) -> bool:
    """All requirements merged per key (webhook/placement/constraints.py); contradictions are refused."""
    plan = ctx.plan
    merged, problems = merge(plan.requirements)
    plan.requirements = merged
    if problems:
        plan.refusals.extend(problems)
        return False
    return True
