"""Kubernetes label selectors (`matchLabels` + `matchExpressions`), compiled once per policy."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from policies.vocabulary.requirements import SET_OPERATORS, Requirement

OPERATORS = SET_OPERATORS  # label selectors know no Gt / Lt


@dataclass(frozen=True)
class LabelSelector:
    requirements: tuple[Requirement, ...]

    def matches(self, labels: Mapping[str, str] | None) -> bool:
        present = labels or {}
        return all(req.matches(present) for req in self.requirements)


def parse_selector(spec: Mapping[str, Any] | None) -> LabelSelector | None:
    """None for an absent selector; an empty selector matches everything, as in Kubernetes."""
    if spec is None:
        return None
    if not isinstance(spec, Mapping):
        raise ValueError("a label selector must be an object")
    # Labels are strings: a value of another type (YAML's unquoted `true` or `1`) or a string where a list
    # belongs would never match what its author meant (`True` is not the label `true`, `values: gpu`
    # would be the letters g, p, u), so it is refused rather than read.
    labels = spec.get("matchLabels") or {}
    if not isinstance(labels, Mapping) or not all(isinstance(k, str) and isinstance(v, str) for k, v in labels.items()):
        raise ValueError("matchLabels must map strings to strings")
    requirements = [Requirement(key, "In", (value,)) for key, value in labels.items()]
    expressions = spec.get("matchExpressions") or []
    if not isinstance(expressions, list) or not all(isinstance(e, Mapping) for e in expressions):
        raise ValueError("matchExpressions must be a list of objects")
    for expression in expressions:
        operator = expression.get("operator")
        if operator not in OPERATORS:
            raise ValueError(f"unknown selector operator {operator!r}")
        listed = expression.get("values") or []
        if not isinstance(expression.get("key"), str) or not isinstance(listed, list) or not all(
                isinstance(v, str) for v in listed):
            raise ValueError("a selector expression needs a string key and a list of string values")
        values = tuple(sorted(set(listed)))
        if operator in ("In", "NotIn") and not values:
            raise ValueError(f"selector operator {operator} needs values")
        if operator in ("Exists", "DoesNotExist") and values:
            raise ValueError(f"selector operator {operator} takes no values")
        requirements.append(Requirement(expression["key"], operator, values))
    return LabelSelector(tuple(requirements))
