"""`kgwe` start-up: the CPU seconds (user + system, of the child process) a command costs from exec to exit.

Measured: `kgwe --help`, `kgwe review --help`, `kgwe nodes --help` (a delegated command), and `kgwe review` of one
example pod against examples/cluster, without and with examples/config.yaml (README's first command); for what
dominates the review, also the import of `webhook.config` alone (pydantic and the configuration's models) and of
`webhook.assembly` alone (the admission core, the runtime and the policy engines, which every review loads).
Baseline, measured in the same run: `python -c pass`, the interpreter's own start. The runs are interleaved (one
of each command per round) so that a busy phase of a shared machine moves every row alike; each row is the
median of its rounds.

Goal (issue 34): `kgwe --help`, `kgwe COMMAND --help` and `kgwe review` of one pod at most 0.3 s of CPU
(docs/performance.md, "The command line's start-up"), each reported against it (`helps_within_goal`,
`reviews_within_goal`).

The commands run as `python -m webhook.cli` from the repository root, so the tree measured is this checkout
(a virtual environment's `kgwe` script may be installed from another one), and with bytecode written (without
PYTHONDONTWRITEBYTECODE), as pip leaves an installed package: the warm-up round compiles, the rounds measured
start from .pyc files.

Run: `.venv/bin/python bench/bench_cli_startup.py [--runs 9] [--json]`.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
POD = "examples/pods/01-single-type.yaml"
CLUSTER = "examples/cluster"
CONFIG = "examples/config.yaml"
HELP_GOAL_SECONDS = 0.3
REVIEW_GOAL_SECONDS = 0.3

KGWE = [sys.executable, "-m", "webhook.cli"]
COMMANDS: dict[str, list[str]] = {
    "baseline: python -c pass": [sys.executable, "-c", "pass"],
    "kgwe --help": [*KGWE, "--help"],
    "kgwe review --help": [*KGWE, "review", "--help"],
    "kgwe nodes --help": [*KGWE, "nodes", "--help"],
    f"kgwe review {POD} --cluster {CLUSTER}": [*KGWE, "review", POD, "--cluster", CLUSTER],
    f"kgwe review {POD} --cluster {CLUSTER} --config {CONFIG}": [
        *KGWE, "review", POD, "--cluster", CLUSTER, "--config", CONFIG,
    ],
    "python -c 'import webhook.config'": [sys.executable, "-c", "import webhook.config"],
    "python -c 'import webhook.assembly'": [sys.executable, "-c", "import webhook.assembly"],
}
BASELINE = "baseline: python -c pass"
HELPS = ("kgwe --help", "kgwe review --help", "kgwe nodes --help")
REVIEWS = tuple(name for name in COMMANDS if name.startswith("kgwe review examples/"))


def cpu_seconds(argv: list[str]) -> float:
    """User + system CPU seconds of one run of `argv` (its output discarded); it must exit 0."""
    env = {name: value for name, value in os.environ.items() if name != "PYTHONDONTWRITEBYTECODE"}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(argv, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True,
                   timeout=120)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def bench_cli_startup(runs: int = 9) -> dict[str, Any]:
    """Median and minimum CPU seconds per command over `runs` interleaved rounds (one warm-up round first, so
    that every command finds its .pyc files written)."""
    samples: dict[str, list[float]] = {name: [] for name in COMMANDS}
    for round_ in range(runs + 1):
        for name, argv in COMMANDS.items():
            seconds = cpu_seconds(argv)
            if round_:
                samples[name].append(seconds)
    baseline = statistics.median(samples[BASELINE])
    medians = {name: statistics.median(values) for name, values in samples.items()}
    commands = {
        name: {"median_s": round(medians[name], 3), "min_s": round(min(values), 3),
               "ratio": round(medians[name] / baseline, 2) if baseline else None}
        for name, values in samples.items()
    }
    return {"runs": runs, "baseline": BASELINE, "commands": commands, "help_goal_s": HELP_GOAL_SECONDS,
            "helps_within_goal": all(medians[name] <= HELP_GOAL_SECONDS for name in HELPS),
            "review_goal_s": REVIEW_GOAL_SECONDS,
            "reviews_within_goal": all(medians[name] <= REVIEW_GOAL_SECONDS for name in REVIEWS)}


def render(result: dict[str, Any]) -> str:
    lines = [f"CPU seconds (user + system), median of {result['runs']} interleaved runs; ratio against "
             f"{result['baseline']}"]
    width = max(len(name) for name in result["commands"])
    for name, row in result["commands"].items():
        goal = (f"  (goal <= {result['help_goal_s']} s)" if name in HELPS
                else f"  (goal <= {result['review_goal_s']} s)" if name in REVIEWS else "")
        lines.append(f"  {name.ljust(width)}  {row['median_s']:6.3f} s  min {row['min_s']:6.3f} s  "
                     f"{row['ratio'] or 0:6.2f}x{goal}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python bench/bench_cli_startup.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=9, help="interleaved rounds (default 9)")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    args = parser.parse_args(argv)
    result = bench_cli_startup(args.runs)
    print(json.dumps(result, indent=2) if args.json else render(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
