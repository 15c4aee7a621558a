"""One Kubernetes selector requirement, `{key, operator, values}`, for label selectors and node selectors alike.

GPUPolicy selectors (`policies/vocabulary/selectors.py`) match it against a pod's or a namespace's labels;
the placement plan (`webhook/placement/constraints.py`) writes it into a pod's node affinity. Values are
a tuple: node constraints keep the order in which they were chosen, and label selectors store them
sorted and without duplicates, so two selectors that say the same thing compare equal.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

SET_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")
NUMERIC_OPERATORS = ("Gt", "Lt")  # node selectors only


@dataclass(frozen=True)
class Requirement:
    key: str
    operator: str  # In | NotIn | Exists | DoesNotExist | Gt | Lt
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Whether labels satisfy the requirement, as the API server and kube-scheduler decide it."""
        if self.operator == "Exists":
            return self.key in labels
        if self.operator == "DoesNotExist":
            return self.key not in labels
        if self.operator == "In":
            return self.key in labels and labels[self.key] in self.values
        if self.operator == "NotIn":
            return self.key not in labels or labels[self.key] not in self.values
        # Gt / Lt: one integer on each side, else no match.
        if self.key not in labels or len(self.values) != 1:
            return False
        try:
            actual, bound = int(labels[self.key]), int(self.values[0])
        except ValueError:
            return False
        return actual > bound if self.operator == "Gt" else actual < bound

    def as_expression(self) -> dict[str, Any]:
        """The requirement as a `matchExpressions` / `nodeSelectorTerms` entry."""
        expr: dict[str, Any] = {"key": self.key, "operator": self.operator}
        if self.operator not in ("Exists", "DoesNotExist"):
            expr["values"] = list(self.values)
        return expr

    @property
    def is_single_in(self) -> bool:
        return self.operator == "In" and len(self.values) == 1
