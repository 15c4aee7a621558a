"""What each pod spent within a window, from either source (pure).

Money is kept as money x seconds (`cost_seconds`: hourly rate x seconds it ran) in `Decimal`, summed
exactly, and divided by 3600 and rounded to the cent once, when a figure is shown (report.py): so the
tenant's total is the exact sum of its pods, not a sum of rounded parts. GPU-hours likewise
(`gpu_seconds`: GPU-equivalents x seconds).

Directory mode (`directory_spend`) reads the pods' lifetimes (rates.py); Prometheus mode (history.py)
fills the same records from KGWE's own cost series.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Container, Iterable
from dataclasses import dataclass
from decimal import Decimal

from webhook.spend.rates import Owner, PodRate

ZERO = Decimal(0)


@dataclass
class PodSpend:
    namespace: str
    pod: str
    tenant: str
    type_id: str
    share: str
    workload: Owner
    run: Owner | None
    seconds: Decimal = ZERO  # how long it ran within the window
    cost_seconds: Decimal = ZERO  # money x seconds
    gpu_seconds: Decimal = ZERO  # GPU-equivalents x seconds
    whole_seconds: Decimal = ZERO  # money x seconds, had each device been a whole GPU
    idle_seconds: Decimal | None = None  # its GPUs below rightsizing.idleBelow; None: usage unknown
    start: float | None = None
    end: float | None = None  # None: still running at the window's end
    unpriced: bool = False

    @property
    def saving_seconds(self) -> Decimal:
        return max(ZERO, self.whole_seconds - self.cost_seconds) if self.share != "whole" else ZERO

    @property
    def idle_cost_seconds(self) -> Decimal | None:
        """The part of its cost spent while its GPUs were idle (at its average rate in the window)."""
        if self.idle_seconds is None:
            return None
        if self.seconds <= 0:
            return ZERO
        return self.cost_seconds * min(self.idle_seconds, self.seconds) / self.seconds


def _seconds(value: float) -> Decimal:
    # Times come from RFC 3339 stamps (whole seconds) or a step grid: three decimals hold them exactly.
    return Decimal(f"{value:.3f}")


def directory_spend(rates: Iterable[PodRate], start: float, end: float, now: float) -> list[PodSpend]:
    """Each pod's spend within `[start, end)`, from its lifetime; running pods count up to `now`."""
    out: list[PodSpend] = []
    for rate in rates:
        ran = rate.seconds_in(start, end, now)
        if ran <= 0:
            continue
        seconds = _seconds(ran)
        out.append(PodSpend(
            namespace=rate.namespace, pod=rate.pod, tenant=rate.tenant, type_id=rate.type_id, share=rate.share,
            workload=rate.workload, run=rate.run, seconds=seconds,
            cost_seconds=(rate.hourly or ZERO) * seconds, gpu_seconds=rate.equivalents * seconds,
            whole_seconds=(rate.whole or rate.hourly or ZERO) * seconds,
            start=rate.start, end=rate.end, unpriced=rate.hourly is None,
        ))
    return out


def tenant_cost_seconds(rates: Iterable[PodRate], start: float, end: float, now: float, tenants: Container[str]
                        ) -> dict[str, Decimal]:
    """`by_tenant(directory_spend(rates, start, end, now))` for `tenants` only (the budgets' refresh), summed in the
    same order without a record per pod."""
    out: dict[str, Decimal] = {}
    for rate in rates:
        if rate.tenant not in tenants:
            continue
        ran = rate.seconds_in(start, end, now)
        if ran <= 0:
            continue
        out[rate.tenant] = out.get(rate.tenant, ZERO) + (rate.hourly or ZERO) * _seconds(ran)
    return out


def bucket_spend(rates: Iterable[PodRate], buckets: list[tuple[float, float]], now: float) -> dict[str, list[Decimal]]:
    """Per tenant, money x seconds in each bucket (the spend-over-time chart), from each pod's lifetime
    interval: the two buckets at its ends get what it ran in them; the whole buckets between get its rate,
    summed per tenant and stretch of buckets first, times the bucket's seconds (a pod that runs all window
    long costs two buckets' work, not one per bucket: 30 for 30 days)."""
    out: dict[str, list[Decimal]] = {}
    starts = [start for start, _end in buckets]
    ends = [end for _start, end in buckets]
    spans: dict[str, dict[tuple[int, int], Decimal]] = {}  # per tenant, (first, last) whole bucket -> rates
    for rate in rates:
        if rate.hourly is None:
            continue
        row = out.setdefault(rate.tenant, [ZERO] * len(buckets))
        if rate.start is None:
            continue
        stop = rate.end if rate.end is not None else now
        first = bisect_right(ends, rate.start)  # the first bucket ending after it started
        last = bisect_left(starts, stop) - 1  # the last bucket starting before it stopped
        if first > last:
            continue
        for index in (first, last) if last > first else (first,):
            ran = rate.seconds_in(starts[index], ends[index], now)
            if ran > 0:
                row[index] += rate.hourly * _seconds(ran)
        if last - first >= 2:  # the buckets between lie wholly within its lifetime
            tenant = spans.setdefault(rate.tenant, {})
            span = (first + 1, last - 1)
            tenant[span] = tenant.get(span, ZERO) + rate.hourly
    for name, tenant_spans in spans.items():
        row = out[name]
        for (first, last), hourly in tenant_spans.items():
            for index in range(first, last + 1):
                row[index] += hourly * _seconds(ends[index] - starts[index])
    return out


def by_tenant(spends: Iterable[PodSpend]) -> dict[str, Decimal]:
    """Money x seconds per tenant."""
    out: dict[str, Decimal] = {}
    for spend in spends:
        out[spend.tenant] = out.get(spend.tenant, ZERO) + spend.cost_seconds
    return out
