"""`kgwe explain` and `kgwe review --explain` (docs/explain.md)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from webhook.explain import Explanation, explain, render_text


def add_explain_parser(commands: Any, add_cluster_and_config: Callable[[argparse.ArgumentParser, bool], None]) -> None:
    parser = commands.add_parser(
        "explain", help="why KGWE places, changes or refuses a pod, step by step",
        description="Explain a pod: the placement trace (each candidate accelerator type and what dropped it), "
                    "each policy and its result, each check of the validating webhook. TARGET is a pod file "
                    "(judged as a new pod, as `kgwe review` does) or NAMESPACE/NAME of a pod in the --cluster "
                    "directory (judged as it is, with what blocks it now when it is not bound). Exit status 0.",
    )
    parser.add_argument("target", metavar="TARGET", help="a pod manifest file, or NAMESPACE/NAME of an existing pod")
    add_cluster_and_config(parser, True)
    parser.add_argument("--user", default="kgwe-explain", help="the requesting user for a new pod")
    parser.add_argument("--group", action="append", default=[], metavar="G", help="a group of the user (repeatable)")
    parser.add_argument("-o", "--output", choices=["text", "json"], default="text", help="output format")


def _print(explanations: list[Explanation], output: str) -> None:
    if output == "json":
        body: Any = explanations[0].as_json() if len(explanations) == 1 else [e.as_json() for e in explanations]
        sys.stdout.write(orjson.dumps(body, option=orjson.OPT_INDENT_2).decode() + "\n")
    else:
        print("\n---\n".join(render_text(e) for e in explanations))


def explain_documents(runtime: Any, documents: list[dict[str, Any]], args: argparse.Namespace) -> int:
    """`kgwe review --explain`: each pod of the file explained as a new pod (other kinds: their review)."""
    from webhook.cli import CommandError

    explanations = []
    for document in documents:
        if str(document.get("kind") or "Pod") != "Pod":
            raise CommandError(f"--explain explains pods; {document.get('kind')} templates are reviewed without it")
        explanations.append(explain(runtime.admission, document, user=args.user, groups=list(args.group),
                                    deadline_seconds=runtime.config.limits.deadline_seconds))
    _print(explanations, args.output)
    return 0


def find_pod(runtime: Any, target: str) -> dict[str, Any] | None:
    """The pod NAMESPACE/NAME in the runtime's cluster model, or None."""
    model = runtime.store.snapshot()
    pod = model.pods.get(target)
    return dict(pod) if isinstance(pod, dict) else None


def cmd_explain(args: argparse.Namespace) -> int:
    from webhook.cli import CommandError, _check_identity_key, _load_config, _read_documents
    from webhook.runtime import build_runtime

    if not args.cluster.is_dir():
        raise CommandError(f"--cluster {args.cluster}: not a directory")
    config = _load_config(args.config)
    _check_identity_key(config)
    try:
        runtime = build_runtime(config, args.cluster)
    except (OSError, ValueError) as exc:
        raise CommandError(f"--cluster {args.cluster}: {exc}") from exc
    path = Path(args.target)
    if path.is_file():
        return explain_documents(runtime, _read_documents(path), args)
    if args.target.count("/") != 1 or not all(args.target.split("/")):
        raise CommandError(f"{args.target}: no such file, and not NAMESPACE/NAME")
    pod = find_pod(runtime, args.target)
    if pod is None:
        raise CommandError(f"{args.target}: no such pod in {args.cluster}")
    found = explain(runtime.admission, pod, existing=True, deadline_seconds=config.limits.deadline_seconds)
    _print([found], args.output)
    return 0
