"""One real Prometheus per session, loaded with a generated DCGM trace (bench/usage_traces.py): Debian's
`prometheus` and `promtool`, installed with apt-get when missing and root, else the tests are skipped."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from usage_traces import PrometheusMissing, TraceWorkload, ensure_prometheus, generate, openmetrics, prometheus_with

SEED = 31
HOURS = 26.0  # more than rightsizing.minHistory (24h) for most workloads; the short ones have 6h


@dataclass
class Trace:
    url: str
    end: float
    workloads: list[TraceWorkload]


@pytest.fixture(scope="session")
def trace() -> Iterator[Trace]:
    try:
        ensure_prometheus()
    except PrometheusMissing as exc:
        pytest.skip(str(exc))
    end = float(int(time.time()) // 300 * 300)
    workloads = generate(SEED, end, HOURS, workloads=14)
    # Two-minute samples keep the trace small (about 20k samples a series family) and the test fast.
    with prometheus_with(openmetrics(workloads, SEED, every=120.0)) as url:
        yield Trace(url, end, workloads)
