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
    requirements = [
        Requirement(str(key), "In", (str(value),))
        for key, value in (spec.get("matchLabels") or {}).items()
    ]
    for expression in spec.get("matchExpressions") or []:
        operator = expression.get("operator")
        if operator not in OPERATORS:
            raise ValueError(f"unknown selector operator {operator!r}")
        values = tuple(sorted({str(v) for v in expression.get("values") or []}))
        if operator in ("In", "NotIn") and not values:
            raise ValueError(f"selector operator {operator} needs values")
        if operator in ("Exists", "DoesNotExist") and values:
            raise ValueError(f"selector operator {operator} takes no values")
        requirements.append(Requirement(str(expression.get("key", "")), operator, values))
    return LabelSelector(tuple(requirements))
