"""The typed read-only view of a Kubernetes node over the API's dict (`NodeView`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from policies.vocabulary.objects import ObjectView, map_at, objects, string, value_at


class NodeView(ObjectView):
    """A node as the API sends it, before `webhook/cluster/node_facts.py` turns it into NodeFacts."""

    __slots__ = ()

    @property
    def unschedulable(self) -> bool:
        """Cordoned. Any true value counts (a YAML file's `yes` too): in doubt, the node takes no pods."""
        return bool(value_at(self.raw, "spec", "unschedulable"))

    @property
    def taints(self) -> tuple[Mapping[str, Any], ...]:
        return objects(value_at(self.raw, "spec", "taints"))

    @property
    def capacity(self) -> Mapping[str, Any]:
        return map_at(self.raw, "status", "capacity")

    @property
    def allocatable(self) -> Mapping[str, Any]:
        """Resource name -> quantity as written; the capacity when allocatable is missing or empty."""
        return map_at(self.raw, "status", "allocatable") or self.capacity

    @property
    def conditions(self) -> tuple[Mapping[str, Any], ...]:
        return objects(value_at(self.raw, "status", "conditions"))

    def condition(self, kind: str) -> str | None:
        """The status (`True`, `False`, `Unknown`) of the condition of type `kind`; None when absent."""
        for condition in self.conditions:
            if condition.get("type") == kind:
                return string(condition.get("status")) or None
        return None
