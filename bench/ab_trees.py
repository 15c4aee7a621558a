"""A paired A/B of the request path between source trees: is a change faster or slower than its base?

Two modes, in thread CPU time, every process with the same hash seed, a fresh process per tree and round:

- `placement` (the default): the placement bench's setup at 10 generated nodes (bench/bench_placement.py:
  the example configuration, no policy engines, a 1-GPU pod naming the commonest type); `build_plan`, the
  mutate core and the validate core, the fastest of `--batches` batches of 200 calls, per call. Each
  round runs the trees one after another, in an order that turns between rounds.
- `admission`: what `/mutate` and `/validate` cost per request with the policy engines, as the server
  runs them minus HTTP (`decode_review`, the admission service, `render_review`, the answer's JSON): the
  example cluster (examples/cluster) under the shipped configuration (examples/config.yaml, the built-in
  Rego policies) and under the same with the example admin policies loaded (examples/policies: CEL and
  Rego GPUPolicies). The pod is bench/data's typical GPU training pod (4.7 KB request; its gang annotation
  left out, so that the example cluster admits it), mutated and then validated as the API server sends
  it: at `/mutate` without a name (generateName only), at `/validate` the pod `/mutate` left, named.
  Two workloads: `distinct`, every pod a label of its own (nothing one pod computed serves another), and
  `replicas`, one workload's replicas (the same pod, only the name and uid differ). Each request's two
  calls are timed on their own; per operation the fastest of `--batches` batches of 20 requests, per
  request. The trees' processes are set up together and then take turns batch by batch (the order
  turning each batch), so that a busy moment of the machine falls on every tree alike.

The answer is each tree's median and geometric mean of the per-round ratios (tree / base, the base
measured in the same round): on a shared machine one run's numbers move by several percent, a pair's
ratio much less. What stays is each process's own luck (its memory layout; regorus' hash seeds): more
rounds, and the same tree measured twice (a copy of the base as one of the trees) to show the spread.

    git archive BASE_COMMIT | tar -x -C /tmp/base
    python bench/ab_trees.py /tmp/base . [--rounds 20] [--batches 30]
    python bench/ab_trees.py . /tmp/without-a /tmp/without-b --mode admission --rounds 30 --raw rounds.jsonl
    python bench/ab_trees.py rounds.jsonl --from-raw

Prints JSON. In `placement` mode every tree must hold bench/bench_placement.py and
bench/generate_cluster.py; `admission` mode needs only the trees' packages and examples.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import IO, Any

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

# The `admission` mode's round: µs of thread CPU per request, by configuration, workload and endpoint.
ADMISSION_ROUND = """
import copy, gc, json, sys, time
from pathlib import Path
root = Path.cwd()
sys.path[:0] = [str(root)]
import orjson, yaml
from webhook.admission.request import decode_review
from webhook.admission.response import render_review
from webhook.config import parse_config
try:
    from webhook.assembly import build_runtime
except ImportError:  # a tree from before the assembly built the runtime (issue 34)
    from webhook.runtime import build_runtime

batch, batches = (int(a) for a in sys.argv[1:3])
shipped = yaml.safe_load((root / "examples" / "config.yaml").read_text())
examples = copy.deepcopy(shipped)
examples.setdefault("policies", {})["directories"] = [str(root / "examples" / "policies")]
request = json.loads((root / "bench" / "data" / "typical-gpu-pod-request.json").read_text())
template = request["object"]
del template["metadata"]["annotations"]["kgwe.io/gang"]  # the example cluster has no NVLink clique for it
del template["metadata"]["name"]  # at /mutate a replica has no name yet

def review(pod, number):
    body = dict(request, uid=f"00000000-0000-4000-8000-{number:012d}", name=pod["metadata"].get("name", ""))
    body["object"] = pod
    return orjson.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": body})

def answer(admission, body, mutating):
    request = decode_review(body)
    outcome = (admission.mutate if mutating else admission.validate)(request)
    orjson.dumps(render_review(request.uid, request.api_version, outcome, mutating))
    return outcome

runtimes = {name: build_runtime(parse_config(yaml.safe_dump(raw)), root / "examples" / "cluster")
            for name, raw in (("shipped", shipped), ("examples", examples))}
count = batch * (batches + 1)  # one batch to warm up
plans = []
for config, runtime in runtimes.items():
    for workload in ("distinct", "replicas"):
        bodies = []
        for number in range(count):
            pod = copy.deepcopy(template)
            if workload == "distinct":
                pod["metadata"]["labels"]["bench-pod"] = str(number)
            bodies.append(review(pod, number))
        plans.append((f"{config}/{workload}", runtime.admission, bodies))
gc.collect()
gc.freeze()
clock = time.thread_time_ns
print("ready", flush=True)
for line in sys.stdin:  # "INDEX": run batch INDEX of every workload, print its µs per request
    index = int(line)
    spent = dict.fromkeys((f"{name}/{op}" for name, _a, _b in plans for op in ("mutate", "validate")), 0.0)
    turn = index % len(plans)  # the workloads' order turns each batch
    for name, admission, bodies in plans[turn:] + plans[:turn]:
        mutate = validate = 0
        for number in range(index * batch, (index + 1) * batch):
            started = clock()
            outcome = answer(admission, bodies[number], True)
            mutate += clock() - started
            assert outcome.allowed, outcome.message
            pod = orjson.loads(orjson.dumps(outcome.object))  # the API server's own copy, named
            pod["metadata"]["name"] = f"trainer-{number}"
            body = review(pod, count + number)
            started = clock()
            outcome = answer(admission, body, False)
            validate += clock() - started
            assert outcome.allowed, outcome.message
        spent[f"{name}/mutate"] = mutate / batch / 1000
        spent[f"{name}/validate"] = validate / batch / 1000
    print(json.dumps(spent), flush=True)
"""

MODES = {"placement": ROUND, "admission": ADMISSION_ROUND}
ADMISSION_BATCH = 20


def one_round(tree: Path, batches: int, mode: str = "placement") -> dict[str, float]:
    """µs per call of each operation in `tree`, from a fresh process (`placement` mode)."""
    done = subprocess.run(
        [sys.executable, "-c", MODES[mode], str(NODES), str(BATCH), str(batches)],
        cwd=tree, env=_env(tree), capture_output=True, text=True, check=False,
    )
    if done.returncode:
        raise RuntimeError(f"the round failed in {tree}:\n{done.stderr[-4000:]}")
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _env(tree: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONHASHSEED": "0", "PYTHONPATH": str(tree)}


def lockstep_round(trees: list[Path], batches: int, index: int) -> dict[Path, dict[str, float]]:
    """µs per request of each operation in each tree (`admission` mode): a fresh process per tree, all set
    up first, then batch after batch, each tree's turn in a turning order, so that a slow moment of the
    machine falls on every tree alike; per tree and operation the fastest batch after the first."""
    best: dict[Path, dict[str, float]] = {tree: {} for tree in trees}
    with contextlib.ExitStack() as stack:
        # Each process's log in a file: a pipe nobody reads could fill and block it.
        logs = {tree: stack.enter_context(tempfile.TemporaryFile("w+")) for tree in trees}
        processes = {tree: subprocess.Popen(
            [sys.executable, "-c", MODES["admission"], str(ADMISSION_BATCH), str(batches)],
            cwd=tree, env=_env(tree), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=logs[tree], text=True,
        ) for tree in trees}
        try:
            for tree, process in processes.items():
                _read(tree, process, logs[tree])  # "ready"
            for batch in range(batches + 1):
                for tree in _order(trees, index + batch):
                    process = processes[tree]
                    assert process.stdin is not None
                    process.stdin.write(f"{batch}\n")
                    process.stdin.flush()
                    spent: dict[str, float] = json.loads(_read(tree, process, logs[tree]))
                    if batch:  # the first batch warms up
                        for op, us in spent.items():
                            best[tree][op] = min(best[tree].get(op, us), us)
        finally:
            for process in processes.values():
                if process.stdin is not None:
                    process.stdin.close()
                process.wait()
    return best


def _read(tree: Path, process: subprocess.Popen[str], log: IO[str]) -> str:
    assert process.stdout is not None
    line = process.stdout.readline()
    if not line:
        process.wait()
        log.seek(0)
        raise RuntimeError(f"the round failed in {tree}:\n{log.read()[-4000:]}")
    return line


def _order(trees: list[Path], index: int) -> list[Path]:
    """The round's order: rotated by one each round, reversed every other, so that every tree runs at
    every position and before and after every other."""
    shift = (index // 2) % len(trees)
    rotated = trees[shift:] + trees[:shift]
    return rotated[::-1] if index % 2 else rotated


def compare_many(base: Path, trees: list[Path], rounds: int, batches: int, mode: str = "placement",
                 raw: Path | None = None) -> dict[str, Any]:
    """For each of `trees`, per operation: the medians of it and of the base, and the paired ratios
    tree / base over `rounds` rounds, each round running every tree once in a fresh process. With `raw`,
    each round's numbers are appended to that file as a line of JSON as soon as the round ends."""
    everyone = [base, *trees]
    results: list[dict[str, dict[str, float]]] = []
    for index in range(rounds):
        if mode == "admission":
            result = {str(tree): found for tree, found in lockstep_round(everyone, batches, index).items()}
        else:
            result = {str(tree): one_round(tree, batches, mode) for tree in _order(everyone, index)}
        results.append(result)
        if raw is not None:
            with raw.open("a") as out:
                out.write(json.dumps({"mode": mode, "base": str(base), "round": index, "trees": result}) + "\n")
        print(f"round {index + 1}/{rounds} done", file=sys.stderr, flush=True)
    return summary(str(base), [str(t) for t in trees], results, mode, batches)


def summary(base: str, trees: list[str], results: list[dict[str, dict[str, float]]], mode: str, batches: int
            ) -> dict[str, Any]:
    """The medians and paired ratios of rounds' `results` (each: by tree, µs by operation)."""
    compared: dict[str, Any] = {}
    for tree in trees:
        ops: dict[str, Any] = {}
        for op in results[0][base]:
            ratios = [r[tree][op] / r[base][op] for r in results]
            ops[op] = {
                "base_median_us": round(statistics.median(r[base][op] for r in results), 1),
                "tree_median_us": round(statistics.median(r[tree][op] for r in results), 1),
                "ratio_median": round(statistics.median(ratios), 3),
                "ratio_geomean": round(math.exp(statistics.mean(math.log(x) for x in ratios)), 3),
            }
        compared[tree] = ops
    if mode == "placement":
        timing = f"thread CPU time, fastest of {batches} batches of {BATCH} calls"
    else:
        timing = f"thread CPU time per request, fastest of {batches} batches of {ADMISSION_BATCH} requests"
    return {"name": "ab_trees", "mode": mode, "base": base, "rounds": len(results), "timing": timing,
            **({"nodes": NODES} if mode == "placement" else {}), "trees": compared}


def from_raw(raw: Path, batches: int) -> dict[str, Any]:
    """The summary of the rounds a `--raw` file holds (also of a run still going)."""
    rows = [json.loads(line) for line in raw.read_text().splitlines() if line.strip()]
    base = rows[0]["base"]
    trees = [t for t in rows[0]["trees"] if t != base]
    return summary(base, trees, [r["trees"] for r in rows], rows[0]["mode"], batches)


def compare(base: Path, tree: Path, rounds: int, batches: int) -> dict[str, Any]:
    """Per-operation medians of each tree and the paired ratios tree / base over `rounds` rounds (placement)."""
    many = compare_many(base, [tree], rounds, batches)
    return {"name": "ab_trees", "base": str(base), "tree": str(tree), "rounds": rounds, "nodes": NODES,
            "timing": many["timing"], "ops": many["trees"][str(tree)]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("base", type=Path, help="the tree to compare against (e.g. a git archive of main)")
    parser.add_argument("trees", type=Path, nargs="*", help="the trees under test (default: .)")
    parser.add_argument("--mode", choices=sorted(MODES), default="placement")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--batches", type=int, default=30)
    parser.add_argument("--raw", type=Path, help="append each round's numbers to this file (JSON lines)")
    parser.add_argument("--from-raw", action="store_true", help="only summarise the rounds in the file BASE")
    args = parser.parse_args(argv)
    if args.from_raw:
        print(json.dumps(from_raw(args.base, args.batches), indent=2))
        return 0
    trees = [t.resolve() for t in args.trees] or [Path.cwd().resolve()]
    found = compare_many(args.base.resolve(), trees, args.rounds, args.batches, args.mode, args.raw)
    print(json.dumps(found, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
