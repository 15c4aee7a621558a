"""Node constraints as data, and how they are written into a pod without dropping the user's own.

A requirement is a node-selector expression `{key, operator, values}`. Requirements are ANDed into
every existing required nodeSelectorTerm (never added as a new, OR-ed term); single-valued `In`
requirements go to `nodeSelector` instead, which is what users and tools expect for one type.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from policies.vocabulary.objects import PodView, pod_view
from policies.vocabulary.requirements import Requirement


def merge(requirements: list[Requirement]) -> tuple[list[Requirement], list[str]]:
    """Combine requirements on one key (In with In intersect); report contradictions."""
    merged: list[Requirement] = []
    problems: list[str] = []
    by_key: dict[str, int] = {}
    for req in requirements:
        index = by_key.get(req.key)
        if index is None or req.operator != "In" or merged[index].operator != "In":
            if req not in merged:
                by_key.setdefault(req.key, len(merged))
                merged.append(req)
            continue
        current = merged[index]
        common = tuple(v for v in current.values if v in req.values)
        if not common:
            problems.append(f"{req.key} must be one of {', '.join(current.values)} and one of {', '.join(req.values)}")
        merged[index] = Requirement(req.key, "In", common)
    return merged, problems


def mapping_at(obj: dict[str, Any], *keys: str) -> dict[str, Any]:
    """The mapping at `keys` under `obj`, created where absent or null (`affinity: null` is valid JSON)."""
    current = obj
    for key in keys:
        child = current.get(key)
        if not isinstance(child, dict):
            child = {}
            current[key] = child
        current = child
    return current


def _spec(pod: dict[str, Any]) -> dict[str, Any]:
    return mapping_at(pod, "spec")


def conflicts_with_pod(pod: PodView | Mapping[str, Any], requirements: list[Requirement]) -> list[str]:
    """The user's nodeSelector values that contradict a requirement (never silently overwritten)."""
    # The selector as written, values of any type (a value that is not a string is still the user's).
    selector = pod_view(pod).spec.get("nodeSelector")
    if not selector or not isinstance(selector, dict):
        return []
    problems = []
    for req in requirements:
        if req.key not in selector:
            continue
        value = str(selector[req.key])
        if req.operator == "In" and value not in req.values:
            problems.append(
                f"the pod's nodeSelector {req.key}={value} contradicts its GPU intent, "
                f"which needs {req.key} in ({', '.join(req.values)})"
            )
        elif req.operator == "NotIn" and value in req.values:
            problems.append(f"the pod's nodeSelector {req.key}={value} is excluded by its GPU intent")
        elif req.operator == "DoesNotExist":
            problems.append(f"the pod's nodeSelector sets {req.key}, which its GPU intent excludes")
    return problems


def apply_requirements(pod: dict[str, Any], requirements: list[Requirement]) -> None:
    spec = _spec(pod)
    selector = spec.get("nodeSelector") or {}
    expressions: list[dict[str, Any]] = []
    for req in requirements:
        if req.is_single_in and not _has_required_terms(pod):
            if selector.get(req.key) != req.values[0]:
                selector = dict(selector)
                selector[req.key] = req.values[0]
            continue
        if req.is_single_in and selector.get(req.key) == req.values[0]:
            continue  # already pinned by nodeSelector (the user's or an earlier pass)
        expressions.append(req.as_expression())
    if selector:
        spec["nodeSelector"] = selector
    if expressions:
        and_into_required_terms(pod, expressions)


def _has_required_terms(pod: dict[str, Any]) -> bool:
    # The pipeline's working pod has no view (it is a new dict each run, written as it is read); read it
    # as the views do, a part of the wrong type as absent, with no call per level (every run asks).
    spec = pod.get("spec")
    affinity = spec.get("affinity") if isinstance(spec, dict) else None
    node_affinity = affinity.get("nodeAffinity") if isinstance(affinity, dict) else None
    required = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution") if isinstance(
        node_affinity, dict
    ) else None
    return isinstance(required, dict) and bool(required.get("nodeSelectorTerms"))


def and_into_required_terms(pod: dict[str, Any], expressions: list[dict[str, Any]]) -> None:
    required = mapping_at(pod, "spec", "affinity", "nodeAffinity", "requiredDuringSchedulingIgnoredDuringExecution")
    terms = required.get("nodeSelectorTerms") or [{}]
    new_terms = []
    for term in terms:
        term = dict(term)
        existing = list(term.get("matchExpressions") or [])
        for expr in expressions:
            if expr not in existing:
                existing.append(expr)
        term["matchExpressions"] = existing
        new_terms.append(term)
    required["nodeSelectorTerms"] = new_terms


def apply_preferences(pod: dict[str, Any], preferences: list[tuple[int, Requirement]]) -> None:
    if not preferences:
        return
    node_affinity = mapping_at(pod, "spec", "affinity", "nodeAffinity")
    preferred = list(node_affinity.get("preferredDuringSchedulingIgnoredDuringExecution") or [])
    for weight, req in preferences:
        term = {"weight": weight, "preference": {"matchExpressions": [req.as_expression()]}}
        if not any(_same_preference(existing, term) for existing in preferred):
            preferred.append(term)
    node_affinity["preferredDuringSchedulingIgnoredDuringExecution"] = preferred


def _same_preference(existing: dict[str, Any], term: dict[str, Any]) -> bool:
    return bool(existing.get("preference") == term["preference"])


def apply_tolerations(pod: dict[str, Any], tolerations: list[dict[str, Any]]) -> None:
    if not tolerations:
        return
    spec = _spec(pod)
    current = list(spec.get("tolerations") or [])
    changed = False
    for toleration in tolerations:
        if toleration not in current:
            current.append(toleration)
            changed = True
    if changed:
        spec["tolerations"] = current
