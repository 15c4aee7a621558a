"""The budget metrics `/metrics` shows (SPEC section 12), set from each refresh of the budget states."""

from __future__ import annotations

from policies.kernel.metric_kinds import gauge
from policies.kernel.metrics import replace_series
from policies.quota.budget import BudgetState

BUDGET_MONTHLY = gauge("kgwe_budget_monthly", "A tenant's monthly budget (pricing currency)", ["tenant"],
                       multiprocess_mode="livemax")
BUDGET_SPENT = gauge("kgwe_budget_spent", "What a tenant spent this month so far (pricing currency)", ["tenant"],
                     multiprocess_mode="livemax")
BUDGET_PROJECTED = gauge("kgwe_budget_projected", "A tenant's projected month-end spend: spent so far plus the "
                         "hourly rate now to the month's end", ["tenant"], multiprocess_mode="livemax")
BUDGET_RATIO = gauge("kgwe_budget_ratio", "Projected month-end spend / monthly budget", ["tenant"],
                     multiprocess_mode="livemax")
BUDGET_EXCEEDED = gauge("kgwe_budget_exceeded", "1 while the projection passes budget.actionAt (the action "
                        "applies to new GPU pods), else 0", ["tenant", "action"], multiprocess_mode="livemax")


def export(states: dict[str, BudgetState]) -> None:
    replace_series(BUDGET_MONTHLY, {(t,): float(s.spec.monthly) for t, s in states.items()})
    replace_series(BUDGET_SPENT, {(t,): float(s.spent) for t, s in states.items()})
    replace_series(BUDGET_PROJECTED, {(t,): float(s.projected) for t, s in states.items()})
    replace_series(BUDGET_RATIO, {(t,): float(s.ratio) for t, s in states.items()})
    replace_series(BUDGET_EXCEEDED, {(t, s.spec.action): float(s.level == "over") for t, s in states.items()},
                   stale=0.0)
