"""`kgwe serve` as users run it: its default worker count (one per usable CPU with --cluster) against one
worker, for /mutate and /validate over every example pod (distinct pods, unique uid per request).

The one-worker run is the baseline measured in the same run; the ratio is what the default buys on this
machine. The load client shares the machine (unpinned: with two workers the server uses every CPU).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import soak  # a sibling module of this script


def _measure(workers: str, endpoint: str, seconds: float) -> dict[str, Any]:
    bodies = [(path, body) for path, body in soak.request_bodies() if path.startswith(endpoint)]
    with soak.kgwe_serve(workers=None if workers == "default" else int(workers)) as server:
        tally = soak._run(soak._drive(server, bodies, 16, seconds + 2, 1_000_000))
    return soak.summarize(tally, 2)


def bench_serve(seconds: float = 6.0) -> dict[str, Any]:
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    results: dict[str, Any] = {
        "name": "kgwe_serve_workers",
        "setup": "kgwe serve --cluster examples/cluster, 16 keep-alive connections, every example pod "
                 "(distinct pods, so /mutate mixes decision-cache hits and misses), unique uid per request",
        "default_workers": min(cpus, 4),
    }
    for endpoint in ("/mutate", "/validate"):
        one = _measure("1", endpoint, seconds)
        default = _measure("default", endpoint, seconds)
        key = endpoint.strip("/")
        results[key] = {"one_worker": one, "default_workers": default,
                        "ratio_req_per_s": default["req_per_s"] / one["req_per_s"] if one["req_per_s"] else 0.0}
    return results


if __name__ == "__main__":
    print(json.dumps(bench_serve(float(sys.argv[1]) if len(sys.argv) > 1 else 6.0), indent=2))
