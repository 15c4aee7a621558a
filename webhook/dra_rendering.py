"""The DRA part of a placement plan (`PlacementPlan.dra`): the claims the DRA wing rendered for the pod
(webhook/dra/plan.py, webhook/dra/render.py), which mutation writes and admission creates. The plan's
vocabulary, so that the core reads it without importing the wing."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson


@dataclass
class DraRendering:
    claims: dict[str, str] = field(default_factory=dict)  # container name -> pod claim name
    templates: dict[str, dict[str, Any]] = field(default_factory=dict)  # pod claim name -> template object
    moved: dict[str, dict[str, str]] = field(default_factory=dict)  # container -> GPU resources moved
    # A sized gang on multi-node NVLink: its ComputeDomain (webhook/dra/compute_domain.py), or None.
    compute_domain: dict[str, Any] | None = None

    @property
    def creates(self) -> list[dict[str, Any]]:
        """The objects the pod needs before it is scheduled: the ComputeDomain first (its controller then
        makes the channel template while KGWE creates the rest), then the claim templates."""
        head = [self.compute_domain] if self.compute_domain is not None else []
        return [*head, *self.templates.values()]

    @property
    def annotation(self) -> str:
        return orjson.dumps(self.moved, option=orjson.OPT_SORT_KEYS).decode()

    def template_name(self, claim: str) -> str:
        return str(self.templates[claim]["metadata"]["name"])
