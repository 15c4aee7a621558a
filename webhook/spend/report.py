"""The costs-over-a-window document of `kgwe costs --window`, `/api/v1/costs?window=` and the Costs page
(pure: records in, a typed document out).

Every amount is summed exactly (money x seconds, `Decimal`) and divided by 3600 and rounded half-up to
the cent once, here, when it is written: a tenant's cost is the rounded exact sum of its pods, so the
rows of a level can differ from its total by at most half a cent per row, never more.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from decimal import ROUND_HALF_UP, Decimal
from typing import NoReturn, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from policies.quota.budget import BudgetState
from webhook.spend.ledger import PodSpend
from webhook.spend.window import Window, stamp

ZERO = Decimal(0)
HOUR = Decimal(3600)
CENT = Decimal("0.01")
UNKNOWN = "unknown"


def money(value_seconds: Decimal) -> str:
    """Money x seconds as an amount: / 3600, rounded half-up to the cent (the one rounding)."""
    return f"{(value_seconds / HOUR).quantize(CENT, rounding=ROUND_HALF_UP):f}"


def amount(value: Decimal) -> str:
    return f"{value.quantize(CENT, rounding=ROUND_HALF_UP):f}"


class _Doc(BaseModel):
    model_config = ConfigDict(populate_by_name=True, serialize_by_alias=True)


class CostRow(_Doc):
    tenant: str
    namespace: str | None = None
    kind: str | None = None
    name: str | None = None
    pods: int
    gpu_hours: str = Field(alias="gpuHours")
    cost: str
    idle_cost: str = Field(alias="idleCost")  # "unknown" where no usage is known for any of its pods
    idle_unknown_cost: str = Field(alias="idleUnknownCost")  # the part of `cost` whose usage is unknown
    savings: str  # shares (MIG, MPS, time-slicing) against as many whole GPUs
    unpriced_pods: int = Field(alias="unpricedPods")


class RunRow(CostRow):
    started: str | None
    finished: str | None  # None: still running
    complete: bool  # every pod of it ran inside the window (else the cost is the window's part)


class PodRow(CostRow):
    pod: str
    share: str  # whole | mig | mps | time-slicing | dra
    accelerator_type: str = Field(alias="acceleratorType")
    started: str | None
    finished: str | None  # None: still running at the window's end


class TenantSeries(_Doc):
    tenant: str
    costs: list[str]


class SpendOverTime(_Doc):
    bucket_seconds: int = Field(alias="bucketSeconds")
    buckets: list[str]  # each bucket's start
    tenants: list[TenantSeries]


class MonthRow(_Doc):
    tenant: str
    spent: str
    hourly_rate: str = Field(alias="hourlyRate")
    hours_left: str = Field(alias="hoursLeft")
    projected: str
    budget: str | None = None
    warn_at: list[str] | None = Field(default=None, alias="warnAt")
    action: str | None = None
    action_at: str | None = Field(default=None, alias="actionAt")
    ratio: str | None = None
    state: str | None = None  # ok | warn | over


class WindowInfo(_Doc):
    duration: str
    start: str = Field(alias="from")
    end: str = Field(alias="to")
    source: str  # prometheus | directory
    step_seconds: int | None = Field(default=None, alias="stepSeconds")


class Totals(_Doc):
    pods: int
    gpu_hours: str = Field(alias="gpuHours")
    cost: str
    idle_cost: str = Field(alias="idleCost")
    idle_unknown_cost: str = Field(alias="idleUnknownCost")
    savings: str
    idle_share: str | None = Field(alias="idleShare")  # idle cost / cost of the pods whose usage is known


class MonthInfo(_Doc):
    start: str = Field(alias="from")
    end: str = Field(alias="to")
    spent: str
    hourly_rate: str = Field(alias="hourlyRate")
    projected: str
    tenants: list[MonthRow]


class WindowCosts(_Doc):
    window: WindowInfo
    totals: Totals
    tenants: list[CostRow]
    namespaces: list[CostRow]
    workloads: list[CostRow]
    runs: list[RunRow]
    pod_costs: list[PodRow] = Field(alias="podCosts")  # every pod that ran in the window, costliest first
    spend_over_time: SpendOverTime = Field(alias="spendOverTime")
    month: MonthInfo
    rounding: str = ("amounts are summed exactly and rounded half-up to the cent once per figure; rows may "
                     "differ from their total by rounding only")


Row = TypeVar("Row", bound=_Doc)


class _SharedFields(set[str]):
    """The names of the fields a row was given, shared by every row given the same ones. A set, as pydantic's
    serializer reads it (`exclude_unset`); never changed: a document's rows are not set after the build, and one
    that were would raise here rather than mark the field given on every row sharing the set."""

    def _refuse(self) -> NoReturn:
        raise TypeError("a costs document's rows are not changed once built")

    def add(self, element: str) -> None:
        self._refuse()

    def update(self, *others: Iterable[str]) -> None:
        self._refuse()

    def discard(self, element: object) -> None:
        self._refuse()

    def remove(self, element: str) -> None:
        self._refuse()

    def clear(self) -> None:
        self._refuse()


# One of each: pydantic keeps a set of the fields given per instance (728 bytes for a pod's row, more than its
# values), and every row of a level is given the same fields.
_FIELDS_GIVEN: dict[frozenset[str], _SharedFields] = {}


def _row(kind: type[Row], values: dict[str, object]) -> Row:
    """`kind` validated from `values`, its set of given fields shared with every row given the same ones."""
    made = kind.model_validate(values)
    given = frozenset(made.__pydantic_fields_set__)
    shared = _FIELDS_GIVEN.get(given)
    if shared is None:
        shared = _FIELDS_GIVEN.setdefault(given, _SharedFields(given))
    object.__setattr__(made, "__pydantic_fields_set__", shared)
    return made


@dataclass
class _Sum:
    pods: set[tuple[str, str]] = field(default_factory=set)
    cost: Decimal = ZERO
    gpu: Decimal = ZERO
    saving: Decimal = ZERO
    idle: Decimal = ZERO
    idle_known: bool = False
    unknown_cost: Decimal = ZERO
    unpriced: int = 0

    def add(self, spend: PodSpend) -> None:
        self.pods.add((spend.namespace, spend.pod))
        self.cost += spend.cost_seconds
        self.gpu += spend.gpu_seconds
        self.saving += spend.saving_seconds
        self.unpriced += spend.unpriced
        idle = spend.idle_cost_seconds
        if idle is None:
            self.unknown_cost += spend.cost_seconds
        else:
            self.idle += idle
            self.idle_known = True

    def fields(self) -> dict[str, object]:
        return {
            "pods": len(self.pods), "gpuHours": money(self.gpu), "cost": money(self.cost),
            "idleCost": money(self.idle) if self.idle_known else UNKNOWN,
            "idleUnknownCost": money(self.unknown_cost), "savings": money(self.saving), "unpricedPods": self.unpriced,
        }


def _sum_of(sums: dict[tuple[str, ...], _Sum], key: tuple[str, ...]) -> _Sum:
    found = sums.get(key)
    if found is None:
        found = sums[key] = _Sum()
    return found


def _by_cost(rows: dict[tuple[str, ...], _Sum]) -> list[tuple[tuple[str, ...], _Sum]]:
    """Costliest first, then by key: sorted by key, then (stably) by cost (one key tuple and no negated
    Decimal per row to compare)."""
    ordered = sorted(rows.items(), key=lambda item: item[0])
    ordered.sort(key=lambda item: item[1].cost, reverse=True)
    return ordered


def build_window_costs(
    window: Window,
    source: str,
    step: float | None,
    spends: list[PodSpend],
    buckets: dict[str, list[Decimal]],
    month: tuple[float, float, list[PodSpend], dict[str, Decimal], float],
    budgets: dict[str, BudgetState],
) -> WindowCosts:
    """The document. `month`: (month start, month end, this month's spends so far, the hourly rate now per
    tenant, now)."""
    # One pass over the spends, each added to its level's sums in the order given (as each level summed
    # them on its own before: the same exact sums).
    total = _Sum()
    by_tenant: dict[tuple[str, ...], _Sum] = {}
    by_namespace: dict[tuple[str, ...], _Sum] = {}
    by_workload: dict[tuple[str, ...], _Sum] = {}
    by_run: dict[tuple[str, str, str, str], list[PodSpend]] = {}
    by_pod: dict[tuple[str, ...], _Sum] = {}
    pod_members: dict[tuple[str, ...], list[PodSpend]] = {}
    for spend in spends:
        total.add(spend)
        namespace, tenant, owner = spend.namespace, spend.tenant, spend.workload
        _sum_of(by_tenant, (tenant,)).add(spend)
        _sum_of(by_namespace, (namespace, tenant)).add(spend)
        _sum_of(by_workload, (namespace, owner.kind, owner.name, tenant)).add(spend)
        pod_key = (namespace, spend.pod, tenant)
        _sum_of(by_pod, pod_key).add(spend)
        pod_members.setdefault(pod_key, []).append(spend)
        if spend.run is not None:
            by_run.setdefault((namespace, spend.run.kind, spend.run.name, tenant), []).append(spend)
    known_cost = total.cost - total.unknown_cost
    tenants = [_row(CostRow, {"tenant": k[0], **s.fields()}) for k, s in _by_cost(by_tenant)]
    namespaces = [_row(CostRow, {"tenant": k[1], "namespace": k[0], **s.fields()})
                  for k, s in _by_cost(by_namespace)]
    workloads = [_row(CostRow, {"tenant": k[3], "namespace": k[0], "kind": k[1], "name": k[2], **s.fields()})
                 for k, s in _by_cost(by_workload)]
    runs: list[RunRow] = []
    for key, members in by_run.items():
        summed = _Sum()
        for member in members:
            summed.add(member)
        starts = [m.start for m in members if m.start is not None]
        ends = [m.end for m in members]
        finished = None if any(e is None for e in ends) else max(e for e in ends if e is not None)
        first = min(starts) if starts else None
        runs.append(_row(RunRow, {
            "tenant": key[3], "namespace": key[0], "kind": key[1], "name": key[2], **summed.fields(),
            "started": stamp(first) if first is not None else None,
            "finished": stamp(finished) if finished is not None else None,
            "complete": first is not None and first >= window.start and finished is not None,
        }))
    runs.sort(key=lambda r: (-Decimal(r.cost), r.namespace or "", r.kind or "", r.name or ""))
    # Each pod's sums and members let go as its row is made: at 150,000 pods the sums and the rows would
    # otherwise be alive together at the build's peak (docs/performance.md, issue 36, thirteenth round).
    ordered_pods = _by_cost(by_pod)
    by_pod.clear()
    ordered_pods.reverse()
    pod_rows = []
    while ordered_pods:
        row_key, summed = ordered_pods.pop()
        members = pod_members.pop(row_key)
        head = members[0]
        pod_starts = [m.start for m in members if m.start is not None]
        pod_ends = [m.end for m in members]
        end = None if any(e is None for e in pod_ends) else max(e for e in pod_ends if e is not None)
        pod_rows.append(_row(PodRow, {
            "tenant": row_key[2], "namespace": row_key[0], "pod": row_key[1], "kind": head.workload.kind,
            "name": head.workload.name, "share": head.share, "acceleratorType": head.type_id, **summed.fields(),
            "started": stamp(min(pod_starts)) if pod_starts else None,
            "finished": stamp(end) if end is not None else None,
        }))
    edges = window.buckets()
    series = SpendOverTime(
        bucketSeconds=window.bucket_seconds, buckets=[stamp(start) for start, _end in edges],
        tenants=[TenantSeries(tenant=t, costs=[money(v) for v in values]) for t, values in sorted(buckets.items())],
    )
    month_start, month_end, month_spends, rates, now = month
    hours_left = Decimal(f"{max(0.0, month_end - now):.3f}") / HOUR
    spent = {t: v for t, v in _month_spent(month_spends).items()}
    month_rows = []
    for tenant in sorted(set(spent) | set(rates) | set(budgets)):
        state = budgets.get(tenant)
        tenant_spent = spent.get(tenant, ZERO) / HOUR
        rate = rates.get(tenant, ZERO)
        row: dict[str, object] = {
            "tenant": tenant, "spent": amount(tenant_spent), "hourlyRate": amount(rate),
            "hoursLeft": f"{hours_left.quantize(Decimal('0.1'), ROUND_HALF_UP):f}",
            "projected": amount(tenant_spent + rate * hours_left),
        }
        if state is not None:
            row.update(budget_fields(state))
        month_rows.append(MonthRow.model_validate(row))
    all_spent = sum(spent.values(), ZERO) / HOUR
    all_rate = sum(rates.values(), ZERO)
    return WindowCosts(
        window=WindowInfo.model_validate({"duration": window.label, "from": stamp(window.start),
                                          "to": stamp(window.end), "source": source,
                                          "stepSeconds": round(step) if step else None}),
        totals=Totals.model_validate({
            "pods": len(total.pods), "gpuHours": money(total.gpu), "cost": money(total.cost),
            "idleCost": money(total.idle) if total.idle_known else UNKNOWN,
            "idleUnknownCost": money(total.unknown_cost), "savings": money(total.saving),
            "idleShare": f"{(total.idle / known_cost).quantize(Decimal('0.0001'), ROUND_HALF_UP):f}"
            if total.idle_known and known_cost > 0 else None,
        }),
        tenants=tenants, namespaces=namespaces, workloads=workloads, runs=runs, podCosts=pod_rows,
        spendOverTime=series,
        month=MonthInfo.model_validate({
            "from": stamp(month_start), "to": stamp(month_end), "spent": amount(all_spent),
            "hourlyRate": amount(all_rate), "projected": amount(all_spent + all_rate * hours_left),
            "tenants": month_rows,
        }),
    )


def budget_fields(state: BudgetState) -> dict[str, object]:
    spec = state.spec
    return {
        "budget": amount(spec.monthly), "warnAt": [f"{w:f}" for w in spec.warn_at], "action": spec.action,
        "actionAt": f"{spec.action_at:f}", "ratio": f"{state.ratio.quantize(Decimal('0.0001'), ROUND_HALF_UP):f}",
        "state": state.level,
    }


def _month_spent(spends: Iterable[PodSpend]) -> dict[str, Decimal]:
    out: dict[str, Decimal] = {}
    for spend in spends:
        out[spend.tenant] = out.get(spend.tenant, ZERO) + spend.cost_seconds
    return out


def csv_rows(doc: WindowCosts) -> list[list[str]]:
    """One flat table of every level (tenant, namespace, workload, run), for `-o csv`."""
    header = ["level", "tenant", "namespace", "kind", "name", "pods", "gpuHours", "cost", "idleCost",
              "idleUnknownCost", "savings", "started", "finished", "from", "to"]
    rows = [header]
    span = [doc.window.start, doc.window.end]
    levels: tuple[tuple[str, list[CostRow]], ...] = (
        ("tenant", list(doc.tenants)), ("namespace", list(doc.namespaces)), ("workload", list(doc.workloads)),
        ("run", list(doc.runs)), ("pod", list(doc.pod_costs)))
    for level, items in levels:
        for row in items:
            started = getattr(row, "started", None) or ""
            finished = getattr(row, "finished", None) or ""
            # A pod's row names the pod; its workload is in kind and name.
            name = row.pod if isinstance(row, PodRow) else row.name or ""
            kind = f"{row.kind}/{row.name}" if isinstance(row, PodRow) else row.kind or ""
            rows.append([level, row.tenant, row.namespace or "", kind, name, str(row.pods),
                         row.gpu_hours, row.cost, row.idle_cost, row.idle_unknown_cost, row.savings,
                         started, finished, *span])
    rows.append(["total", "", "", "", "", str(doc.totals.pods), doc.totals.gpu_hours, doc.totals.cost,
                 doc.totals.idle_cost, doc.totals.idle_unknown_cost, doc.totals.savings, "", "", *span])
    return rows
