"""`kgwe serve` as users run it: its default worker count (one per usable CPU with --cluster) against one
worker, for /mutate and /validate over every example pod (distinct pods, unique uid per request).

The one-worker run is the baseline measured in the same run; the ratio is what the default buys on this
machine. The load client shares the machine (unpinned: with two workers the server uses every CPU).
A last row loads the three admin Rego policies of issue 17's side-by-side with Gatekeeper and drives
`/validate` with the example pods they admit, against the same pods without them.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import orjson
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))

import soak  # a sibling module of this script

THREE_POLICIES = Path(__file__).resolve().parent / "data" / "three_policies"
_ALLOWED_REGISTRIES = ("nvcr.io/", "registry.example.com/", "fluent/")  # what allowed_repos.rego admits


def _measure(workers: str, endpoint: str, seconds: float, bodies: list[tuple[str, bytes]] | None = None,
             extra_args: tuple[str, ...] = ()) -> dict[str, Any]:
    if bodies is None:
        bodies = [(path, body) for path, body in soak.request_bodies() if path.startswith(endpoint)]
    with soak.kgwe_serve(workers=None if workers == "default" else int(workers), extra_args=extra_args) as server:
        tally = soak._run(soak._drive(server, bodies, 16, seconds + 2, 1_000_000))
    return soak.summarize(tally, 2)


def _three_policy_config(directory: Path) -> Path:
    """The example configuration with the three admin Rego policies of issue 17's side-by-side loaded."""
    config = yaml.safe_load(soak.CONFIG.read_text())
    config["policies"] = {**(config.get("policies") or {}), "directories": [str(THREE_POLICIES)]}
    path = directory / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def _admitted_validate_bodies(config: Path) -> list[tuple[str, bytes]]:
    """/validate bodies (the pod as /mutate left it) of the example pods the three policies admit: those
    whose images come from the allowed registries, with an owner label added. Admitted, so that every
    request pays for the whole check (a refusal stops early)."""
    from webhook.assembly import build_runtime
    from webhook.config import load_config
    from webhook.review import create_review, review_pod

    runtime = build_runtime(load_config(config), soak.CLUSTER)
    bodies = []
    for path in sorted(soak.PODS.glob("*.yaml")):
        pod = soak._load_pod(path)
        containers = pod["spec"].get("containers", []) + pod["spec"].get("initContainers", [])
        if not all(str(c.get("image", "")).startswith(_ALLOWED_REGISTRIES) for c in containers):
            continue
        pod["metadata"].setdefault("labels", {})["owner"] = "bench"
        reviewed = review_pod(runtime.admission, pod, "soak", ["team-a"], 10)
        if not reviewed.allowed:
            continue
        review = create_review(reviewed.object, "soak", ["team-a"])
        review["request"]["uid"] = soak.UID_PLACEHOLDER
        bodies.append(("/validate?timeout=10s", orjson.dumps(review)))
    if not bodies:
        raise RuntimeError("no example pod passes the three policies")
    return bodies


def _three_policies(seconds: float) -> dict[str, Any]:
    """`/validate` at the default worker count, the same admitted pods with and without the three admin Rego
    policies: what those policies cost a request end to end."""
    with tempfile.TemporaryDirectory(prefix="kgwe-bench-") as tmp:
        config = _three_policy_config(Path(tmp))
        bodies = _admitted_validate_bodies(config)
        without = _measure("default", "/validate", seconds, bodies)
        loaded = _measure("default", "/validate", seconds, bodies, ("--config", str(config)))
    return {"pods": len(bodies), "without_policies": without, "three_policies": loaded,
            "ratio_req_per_s": loaded["req_per_s"] / without["req_per_s"] if without["req_per_s"] else 0.0}


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
    results["validate_three_admin_policies"] = _three_policies(seconds)
    return results


if __name__ == "__main__":
    print(json.dumps(bench_serve(float(sys.argv[1]) if len(sys.argv) > 1 else 6.0), indent=2))
