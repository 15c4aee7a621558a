"""Tenant budgets (SPEC section 12): `TenantQuota.spec.budget`, judged on projected month-end spend (pure).

    budget: {monthly: "20000", warnAt: [0.8], action: Warn | Deny | Queue, actionAt: 1}

projected = spent so far this month + the current hourly rate x the hours left in the month. Passing a
`warnAt` share of `monthly` gives new GPU pods of the tenant a warning; passing `actionAt` (default 1: the
budget itself) takes the action: `Warn` warns, `Deny` refuses them at `/validate`, `Queue` keeps them
behind the quota gate (the quota controller releases none of the tenant's pods meanwhile). The message
carries the figures. Where several TenantQuotas of a tenant state budgets, the smallest monthly applies.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

log = logging.getLogger(__name__)

Action = Literal["Warn", "Deny", "Queue"]
Level = Literal["ok", "warn", "over"]
CENT = Decimal("0.01")


class BudgetSpec(BaseModel):
    """`spec.budget` of a TenantQuota, as the CRD schema states it."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    monthly: Decimal = Field(gt=0)
    warn_at: list[Decimal] = Field(default_factory=lambda: [Decimal("0.8")], alias="warnAt")
    action: Action = "Warn"
    action_at: Decimal = Field(default=Decimal(1), gt=0, alias="actionAt")

    @field_validator("monthly", mode="before")
    @classmethod
    def _money(cls, value: object) -> object:
        if isinstance(value, float):
            return Decimal(repr(value))
        return value

    @field_validator("warn_at", mode="before")
    @classmethod
    def _shares(cls, value: object) -> object:
        if isinstance(value, list):
            return [Decimal(repr(v)) if isinstance(v, float) else v for v in value]
        return value


def budget_of(quotas: Iterable[Mapping[str, Any]]) -> BudgetSpec | None:
    """The budget that applies to a tenant: the smallest monthly among its TenantQuotas' budgets."""
    found: list[BudgetSpec] = []
    for quota in quotas:
        raw = (quota.get("spec") or {}).get("budget")
        if raw is None:
            continue
        try:
            found.append(BudgetSpec.model_validate(raw))
        except (ValidationError, InvalidOperation, TypeError) as exc:
            name = (quota.get("metadata") or {}).get("name")
            log.warning("TenantQuota %s: spec.budget ignored: %s", name, str(exc).splitlines()[0])
    return min(found, key=lambda b: b.monthly) if found else None


@dataclass(frozen=True)
class BudgetState:
    tenant: str
    spec: BudgetSpec
    spent: Decimal  # this month so far
    hourly: Decimal  # the rate now
    hours_left: Decimal  # to the month's end
    currency: str
    month_end: str  # RFC 3339

    @property
    def projected(self) -> Decimal:
        return self.spent + self.hourly * self.hours_left

    @property
    def ratio(self) -> Decimal:
        return self.projected / self.spec.monthly

    @property
    def level(self) -> Level:
        if self.ratio >= self.spec.action_at:
            return "over"
        if any(self.ratio >= share for share in self.spec.warn_at):
            return "warn"
        return "ok"

    @property
    def threshold(self) -> Decimal | None:
        """The highest threshold passed (warnAt shares and actionAt), None below all."""
        passed = [s for s in (*self.spec.warn_at, self.spec.action_at) if self.ratio >= s]
        return max(passed) if passed else None

    def message(self) -> str:
        """`team-a: projected month-end spend 21340.00 USD (spent 12000.00 + 18.40 USD/h x 507.0 h to
        2026-12-01T00:00:00Z) is 107% of the monthly budget 20000.00 USD`."""
        c = self.currency
        return (f"{self.tenant}: projected month-end spend {cents(self.projected)} {c} (spent {cents(self.spent)} "
                f"+ {cents(self.hourly)} {c}/h x {self.hours_left.quantize(Decimal('0.1'), ROUND_HALF_UP)} h to "
                f"{self.month_end}) is {percent(self.ratio)} of the monthly budget {cents(self.spec.monthly)} {c}")


    def short(self) -> str:
        """The figures in a warning's 120 characters: `team-a projects 720.00 of 800.00 USD (90%; spent 508.50,
        4.50/h)`."""
        return (f"{self.tenant} projects {cents(self.projected)} of {cents(self.spec.monthly)} {self.currency} "
                f"({percent(self.ratio)}; spent {cents(self.spent)}, {cents(self.hourly)}/h)")


def cents(value: Decimal) -> str:
    return f"{value.quantize(CENT, rounding=ROUND_HALF_UP):f}"


def percent(ratio: Decimal) -> str:
    return f"{(ratio * 100).quantize(Decimal(1), rounding=ROUND_HALF_UP)}%"


@dataclass(frozen=True)
class BudgetVerdict:
    """What admission does with a new GPU pod of the tenant: `allow` (maybe with a warning), `deny` or
    `queue`."""

    effect: Literal["allow", "deny", "queue"]
    warning: str | None
    reason: str | None


_ALLOW = BudgetVerdict("allow", None, None)  # frozen: one shared by every pod of a tenant within budget


def judge(state: BudgetState | None) -> BudgetVerdict:
    if state is None or state.level == "ok":
        return _ALLOW
    # Warnings are cut at 120 characters by the API server's rules: the short figures; refusals and the
    # waiting pods' conditions carry the whole computation.
    text, short = state.message(), state.short()
    if state.level == "warn":
        return BudgetVerdict("allow", f"budget warning: {short}", None)
    action = state.spec.action
    if action == "Deny":
        return BudgetVerdict("deny", None, f"budget exceeded: {text}; new GPU pods are refused (budget.action: Deny)")
    if action == "Queue":
        return BudgetVerdict("queue", f"budget exceeded: {short}; new GPU pods wait",
                             f"budget exceeded: {text}; new GPU pods wait (budget.action: Queue)")
    return BudgetVerdict("allow", f"budget exceeded: {short}", None)
