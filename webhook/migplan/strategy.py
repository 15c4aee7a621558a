"""`MIGStrategy` (kgwe.io/v1alpha1, cluster-scoped; SPEC section 11) read into a typed model.

A strategy that does not read is reported by name with the reason and planned for no node: a typo in one
strategy must not stop the others (nor the CLI).
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic.alias_generators import to_camel

from policies.vocabulary.objects import ObjectView
from policies.vocabulary.selectors import LabelSelector, parse_selector

DEFAULT_REBALANCE_SECONDS = 600.0
_DURATION = re.compile(r"^(\d+(?:\.\d+)?)(s|m|h|d)$")
_UNIT = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def duration_seconds(text: str) -> float:
    """`90s`, `10m`, `1h`, `1d` in seconds; ValueError otherwise."""
    match = _DURATION.fullmatch(text.strip())
    if match is None:
        raise ValueError(f"{text!r} is not a duration such as 30s, 10m, 1h")
    return float(match.group(1)) * _UNIT[match.group(2)]


class _Model(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, frozen=True, extra="ignore")


class PreferredProfile(_Model):
    """A profile and the share of the selected GPUs' compute slices it should have when demand leaves room."""

    profile: str = Field(pattern=r"^[0-9]+g\.[0-9]+gb$")
    share: float = Field(gt=0, le=1)


class MigStrategySpec(_Model):
    node_selector: dict[str, Any] | None = None  # a label selector (matchLabels / matchExpressions)
    preferred_profiles: list[PreferredProfile] = Field(default_factory=list, max_length=32)
    rebalance_interval: str = "10m"
    min_utilization: float = Field(default=0.0, ge=0, le=1)
    mode: Literal["recommend", "apply"] = "recommend"

    @field_validator("rebalance_interval")
    @classmethod
    def _interval(cls, value: str) -> str:
        duration_seconds(value)
        return value

    @field_validator("node_selector")
    @classmethod
    def _selector(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        parse_selector(value)  # raises ValueError naming what is wrong
        return value

    @property
    def rebalance_seconds(self) -> float:
        return duration_seconds(self.rebalance_interval)

    def selector(self) -> LabelSelector | None:
        return parse_selector(self.node_selector)


class MigStrategy(_Model):
    name: str
    spec: MigStrategySpec
    status: dict[str, Any] = Field(default_factory=dict)
    resource_version: str = ""


def read_strategy(obj: dict[str, Any]) -> MigStrategy | str:
    """The strategy, or one line saying why it cannot be read."""
    view = ObjectView(obj)
    try:
        spec = MigStrategySpec.model_validate(obj.get("spec") or {})
    except (ValidationError, ValueError) as exc:
        first = exc.errors()[0] if isinstance(exc, ValidationError) else {"loc": (), "msg": str(exc)}
        where = ".".join(str(p) for p in first["loc"])
        return f"MIGStrategy {view.name}: spec{'.' + where if where else ''}: {first['msg']}"
    status = obj.get("status") if isinstance(obj.get("status"), dict) else {}
    return MigStrategy(name=view.name, spec=spec, status=status or {}, resource_version=view.resource_version or "")
