"""Node agent benchmark: one full scan of the DGX H100 fixture (8 GPUs, 18 NVLinks each, NVSwitch).

"One full scan" is what the agent does each interval before talking to the API: NVML init, every
per-GPU query through the real `pynvml` binding, NVML shutdown, and building the topology document.
The baseline, measured in the same run, is the fake NVML library answering the very same C calls with
no binding and no agent in between; the ratio says what the binding and the agent add on top of it.
On real hardware the driver's own cost (nvmlInit alone is tens of milliseconds) dominates both.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

_ROOT = Path(__file__).resolve().parents[1]
for _path in (_ROOT, _ROOT / "tests" / "fixtures" / "nvml"):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

from fake_nvml import installed, replay_seconds  # noqa: E402
from nvml_machines import dgx_h100  # noqa: E402

from agent.document import build_document  # noqa: E402
from agent.nvml_discovery import scan  # noqa: E402


def _percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


def _summary(seconds: list[float]) -> dict[str, float]:
    return {
        "median_ms": statistics.median(seconds) * 1000,
        "p99_ms": _percentile(seconds, 0.99) * 1000,
        "min_ms": min(seconds) * 1000,
    }


def bench_agent_scan(runs: int = 200, warmup: int = 20) -> dict[str, Any]:
    """Time `runs` full scans of the DGX H100 fixture, and the fake library's raw calls for the same scan."""
    now = datetime.now(UTC)
    scans: list[float] = []
    baseline: list[float] = []
    with installed(dgx_h100()) as library:
        for _ in range(warmup):
            build_document(scan(), node_name="bench", now=now)
        for _ in range(runs):
            start = time.perf_counter()
            build_document(scan(), node_name="bench", now=now)
            scans.append(time.perf_counter() - start)
        library.log = []
        library.calls.clear()
        doc = build_document(scan(), node_name="bench", now=now)
        log, library.log = library.log, None
        calls = sum(library.calls.values())
        for _ in range(warmup):
            replay_seconds(library, log)
        baseline = [replay_seconds(library, log) for _ in range(runs)]
    scan_summary = _summary(scans)
    baseline_summary = _summary(baseline)
    return {
        "name": "agent_scan_dgx_h100",
        "fixture": "DGX H100: 8 GPUs x 18 NVLinks into 4 NVSwitches",
        "runs": runs,
        "nvml_calls_per_scan": calls,
        "gpus": len(doc.gpus),
        "domain_size": doc.nvlink.domain_size,
        "scan": scan_summary,
        "baseline_raw_fake_nvml_calls": baseline_summary,
        "ratio_median": scan_summary["median_ms"] / baseline_summary["median_ms"],
        "python": sys.version.split()[0],
    }


if __name__ == "__main__":
    print(json.dumps(bench_agent_scan(), indent=2))
