"""A paired A/B of the request path between two source trees: is a change faster or slower than its base?

Each round runs the placement bench's setup at 10 generated nodes (bench/bench_placement.py: the example
configuration, no policy engines, a 1-GPU pod naming the commonest type) once in each tree, in its own
process, and times `build_plan`, the mutate core and the validate core in thread CPU time: the fastest of
`--batches` batches of 200 calls, per call. The order of the trees alternates between rounds and every
process runs with the same hash seed, so what differs between a pair is the code. The answer is the
median and geometric mean of the per-round ratios (tree / base): on a shared machine one run's numbers
move by several percent, a pair's ratio much less.

    git archive BASE_COMMIT | tar -x -C /tmp/base
    python bench/ab_trees.py /tmp/base . [--rounds 20] [--batches 30]

Prints JSON. Both trees must hold bench/bench_placement.py and bench/generate_cluster.py.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

NODES = 10
BATCH = 200

# Run in the tree under test (its own modules first on the path); prints one JSON line of µs per call.
ROUND = """
import gc, json, sys, time
from pathlib import Path
root = Path.cwd()
sys.path[:0] = [str(root), str(root / "bench")]
import orjson
from bench_placement import CONFIG, _store, typical_pod
from generate_cluster import generate_nodes
from webhook.admission.request import decode_review
from webhook.config import load_config
from webhook.intent import parse_intent
from webhook.placement.plan import build_plan
from webhook.review import create_review
from webhook.assembly import build_runtime

nodes, batch, batches = (int(a) for a in sys.argv[1:4])
config = load_config(CONFIG)
store = _store(config, generate_nodes(nodes))
model = store.snapshot(force=True)
runtime = build_runtime(config, None, store=store, load_policies=False)
pod = typical_pod(model)
intent = parse_intent(pod)
mutate_body = orjson.dumps(create_review(pod, "bench", ["team-a"]))
mutated = runtime.admission.mutate(decode_review(mutate_body))
validate_body = orjson.dumps(create_review(mutated.object or pod, "bench", ["team-a"]))
ops = {
    "build_plan": lambda: build_plan(pod, intent, None, model, config),
    "mutate_core": lambda: runtime.admission.mutate(decode_review(mutate_body)),
    "validate_core": lambda: runtime.admission.validate(decode_review(validate_body)),
}
gc.collect()
gc.freeze()
out = {}
for name, fn in ops.items():
    for _ in range(batch * 2):
        fn()
    best = float("inf")
    for _ in range(batches):
        started = time.thread_time_ns()
        for _ in range(batch):
            fn()
        best = min(best, (time.thread_time_ns() - started) / batch / 1000)
    out[name] = best
print(json.dumps(out))
"""


def one_round(tree: Path, batches: int) -> dict[str, float]:
    """µs per call of each operation in `tree`, from a fresh process."""
    env = {**os.environ, "PYTHONHASHSEED": "0", "PYTHONPATH": str(tree)}
    done = subprocess.run(
        [sys.executable, "-c", ROUND, str(NODES), str(BATCH), str(batches)],
        cwd=tree, env=env, capture_output=True, text=True, check=True,
    )
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def compare(base: Path, tree: Path, rounds: int, batches: int) -> dict[str, Any]:
    """Per-operation medians of each tree and the paired ratios tree / base over `rounds` rounds."""
    pairs: list[tuple[dict[str, float], dict[str, float]]] = []
    for index in range(rounds):
        if index % 2:
            ours = one_round(tree, batches)
            theirs = one_round(base, batches)
        else:
            theirs = one_round(base, batches)
            ours = one_round(tree, batches)
        pairs.append((theirs, ours))
    out: dict[str, Any] = {}
    for op in pairs[0][0]:
        ratios = [o[op] / b[op] for b, o in pairs]
        out[op] = {
            "base_median_us": round(statistics.median(b[op] for b, _o in pairs), 1),
            "tree_median_us": round(statistics.median(o[op] for _b, o in pairs), 1),
            "ratio_median": round(statistics.median(ratios), 3),
            "ratio_geomean": round(math.exp(statistics.mean(math.log(r) for r in ratios)), 3),
        }
    return {"name": "ab_trees", "base": str(base), "tree": str(tree), "rounds": rounds, "nodes": NODES,
            "timing": f"thread CPU time, fastest of {batches} batches of {BATCH} calls", "ops": out}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("base", type=Path, help="the tree to compare against (e.g. a git archive of main)")
    parser.add_argument("tree", type=Path, nargs="?", default=Path.cwd(), help="the tree under test (default: .)")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--batches", type=int, default=30)
    args = parser.parse_args(argv)
    print(json.dumps(compare(args.base.resolve(), args.tree.resolve(), args.rounds, args.batches), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
