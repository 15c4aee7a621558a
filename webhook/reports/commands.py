"""The reports on the command line: `kgwe nodes`, `profiles`, `audit`, `costs`, `gangs`, `recommend`, `mig-plan`.

Each reads the cluster from `--cluster DIR` (YAML manifests) or, without it, from the Kubernetes API
(kubeconfig or in-cluster service account), builds the same runtime `kgwe serve` uses, prints one
view as a table (default; `-o wide` adds columns, as kubectl's does), JSON or YAML, and exits 0 (`kgwe audit
--exit-code`: 1 when a finding fails); errors go to stderr with exit status 2. The parsers are in parsers.py, how a
report reads the cluster in reading.py, and each report in the module named for what it shows, imported when it runs.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable

from webhook.reports.parsers import build_parser

# Command -> (module, function): imported when the command runs, so `kgwe nodes --help` reads the parser alone.
COMMANDS: dict[str, tuple[str, str]] = {
    "nodes": ("webhook.reports.node_reports", "cmd_nodes"),
    "profiles": ("webhook.reports.node_reports", "cmd_profiles"),
    "audit": ("webhook.reports.fleet_reports", "cmd_audit"),
    "costs": ("webhook.reports.cost_reports", "cmd_costs"),
    "gangs": ("webhook.reports.fleet_reports", "cmd_gangs"),
    "recommend": ("webhook.reports.usage_reports", "cmd_recommend"),
    "mig-plan": ("webhook.reports.usage_reports", "cmd_mig_plan"),
}


def parser_for(command: str) -> argparse.ArgumentParser:
    """The parser of `kgwe COMMAND` (shell completion reads its flags)."""
    return build_parser(command)


def run(command: str, argv: list[str]) -> int:
    """Run `kgwe COMMAND ARGV...`; returns the exit status."""
    if command not in COMMANDS:
        print(f"kgwe: unknown report {command!r} (expected: {', '.join(COMMANDS)})", file=sys.stderr)
        return 2
    parser = build_parser(command)
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help (0) or a usage error (2, already printed)
        return int(exc.code or 0)
    from webhook.reports.reading import CommandError, read_cluster

    module, function = COMMANDS[command]
    report: Callable[..., str | tuple[str, int]] = getattr(importlib.import_module(module), function)
    try:
        output = report(args, read_cluster(args))
    except CommandError as exc:
        print(f"kgwe {command}: {exc}", file=sys.stderr)
        return 2
    text, status = output if isinstance(output, tuple) else (output, 0)
    sys.stdout.write(text + "\n")
    return status
