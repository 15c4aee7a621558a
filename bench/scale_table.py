"""bench/run.py's rows for bench_scale.py: each figure at the large size against the same at the baseline size,
judged by issue 36's goals."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from bench_scale import READ_PATHS

GOAL_READY_S = 60.0
GOAL_RSS_MIB = 1.5e9 / 2**20  # 1.5 GB
GOAL_LATENCY_RATIO = 1.5
GOAL_REFLECTED_MS = 1000.0
GOAL_READ_MS = 1000.0
GOAL_ADDED_P99_MS = 100.0
BOUNDED_PASS_MS = 1.0  # a quota pass under this is not a walk of every pod


def _at(data: Any, *keys: str) -> Any:
    for key in keys:
        if not isinstance(data, dict) or key not in data:
            return None
        data = data[key]
    return data


def scale_rows(result: dict[str, Any], row: Callable[..., Any]) -> list[Any]:
    """bench/run.py's table rows: each figure at the large size against the same at the baseline size."""
    small, large = str(result["baseline_nodes"]), str(result["nodes"])
    base, big = result["sizes"].get(small) or {}, result["sizes"].get(large) or {}
    at = f"at {int(large):,} GPU nodes, {_at(big, 'fleet', 'pods') or 0:,} pods"
    same = f"the same at {int(small):,} nodes"

    def line(label: str, keys: tuple[str, ...], unit: str, goal: str = "",
             judge: Callable[[float, float | None], bool] | None = None, scale: float = 1.0) -> Any:
        measured, baseline = _at(big, *keys), _at(base, *keys)
        # A figure the bench could not take is recorded as {"error": ...}: shown as missing, not a crash.
        measured = measured * scale if isinstance(measured, (int, float)) else None
        baseline = baseline * scale if isinstance(baseline, (int, float)) else None
        ok = None if judge is None or measured is None else judge(measured, baseline)
        return row(f"scale {at}: {label}", measured, baseline, unit, same, goal, ok)

    def ratio_within(limit: float) -> Callable[[float, float | None], bool]:
        return lambda measured, baseline: bool(baseline) and measured <= limit * (baseline or 0)

    added = None
    if _at(big, "admission", "create_through_kgwe", "p99_ms") is not None:
        added = big["admission"]["create_through_kgwe"]["p99_ms"] - big["admission"]["create_without_kgwe"]["p99_ms"]
    rows = [
        line("start-up, empty cache to /readyz", ("startup", "ready_s"), "s", f"<= {GOAL_READY_S:.0f} s",
             lambda m, _b: m <= GOAL_READY_S),
        line("start-up: KGWE after the last page of pods", ("startup", "after_last_pod_page_s"), "s"),
        line("worker VmRSS after the run", ("memory_at_end_kib", "VmRSS"), "MiB", "<= 1.5 GB",
             lambda m, _b: m <= GOAL_RSS_MIB, 1 / 1024),
        line("worker VmHWM (peak)", ("memory_at_end_kib", "VmHWM"), "MiB", "", None, 1 / 1024),
        line("/mutate p99", ("admission", "mutate", "p99_ms"), "ms", f"<= {GOAL_LATENCY_RATIO}x",
             ratio_within(GOAL_LATENCY_RATIO)),
        line("/validate p99", ("admission", "validate", "p99_ms"), "ms", f"<= {GOAL_LATENCY_RATIO}x",
             ratio_within(GOAL_LATENCY_RATIO)),
        row(f"scale {at}: create -> stored, p99 added by KGWE's admission", added,
            _at(big, "admission", "create_without_kgwe", "p99_ms"), "ms", "storing it without KGWE",
            f"< {GOAL_ADDED_P99_MS:.0f} ms", None if added is None else added < GOAL_ADDED_P99_MS),
        line("node change -> decision", ("node_change", "reflected_ms"), "ms", f"<= {GOAL_REFLECTED_MS:.0f} ms",
             lambda m, _b: m <= GOAL_REFLECTED_MS),
        line("pod change -> quota release", ("pod_change", "reflected_ms"), "ms", f"<= {GOAL_REFLECTED_MS:.0f} ms",
             lambda m, _b: m <= GOAL_REFLECTED_MS),
        # One pass's time: a few microseconds either way are the GIL's, so a pass under a millisecond is bounded
        # too (every pod visited at 0.1 us each would be 15 ms at 150,000 pods).
        line("quota controller pass", ("quota_pass_s",), "ms", "bounded: <= 1.5x, or < 1 ms",
             lambda m, b: m < BOUNDED_PASS_MS or ratio_within(GOAL_LATENCY_RATIO)(m, b), 1000),
        line("UI first page (/ui/ + /api/v1/nodes), first load", ("reads", "ui_first_page_ms"), "ms",
             f"<= {GOAL_READ_MS:.0f} ms", lambda m, _b: m <= GOAL_READ_MS),
    ]
    for path in READ_PATHS[1:]:
        label = f"GET {path}, median of 3 (one when over 10 s)"
        failed = _at(big, "reads", path, "error")
        if failed:  # timed out: a miss with no figure
            rows.append(row(f"scale {at}: {label}: {failed}", None, _at(base, "reads", path, "median_ms"), "ms",
                            same, f"<= {GOAL_READ_MS:.0f} ms", False))
            continue
        rows.append(line(label, ("reads", path, "median_ms"), "ms", f"<= {GOAL_READ_MS:.0f} ms",
                         lambda m, _b: m <= GOAL_READ_MS))
    return rows
