"""The `kgwe` command line (SPEC section 4).

Start-up is kept light: this module, the parsers and `--help` import no engine, client or model (pydantic,
the kubernetes client, the policy engines); each command imports what it needs when it runs, and a
delegated command's module is imported only when that command is given (docs/performance.md, "The command
line's start-up"; tests/firsthour/test_cli_startup.py holds it).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from webhook.command_input import (
    CommandError,
    check_directory,
    check_identity_key,
    load_config,
    read_documents,
    runtime_from_directory,
)
from webhook.explain_cli import EXIT_CODE_HELP
from webhook.output import FORMATS, render

if TYPE_CHECKING:
    from webhook.config import Config

# Commands that belong to other packages: (module, how its `run` is called, one-line help).
DELEGATED: dict[str, tuple[str, str, str]] = {
    "policy": (
        "policies.runtime.testing", "args", "policy tools: `kgwe policy test [DIR]` runs Rego tests and CEL cases"
    ),
    "agent": ("agent.main", "args", "the node agent (NVML discovery, topology publishing)"),
    "certs": ("certs.commands", "args", "make, renew and rotate certificates; patch caBundle"),
    "nodes": ("webhook.reports.commands", "command", "the node view: accelerator types, GPUs, topology"),
    "profiles": ("webhook.reports.commands", "command", "hardware profiles with availability and price"),
    "audit": ("webhook.reports.commands", "command", "check existing pods against the policies"),
    "costs": ("webhook.reports.commands", "command", "GPU cost of running pods by tenant and type"),
    "gangs": ("webhook.reports.commands", "command", "gangs: size, members present and bound, room, why waiting"),
    "recommend": ("webhook.reports.commands", "command",
                  "rightsizing from GPU usage in Prometheus: recommended shapes and savings; --idle: idle GPUs"),
    "mig-plan": ("webhook.reports.commands", "command",
                 "MIG layouts that follow demand: per node a MIGStrategy selects, the MIG manager config to set"),
}


def _add_cluster_and_config(parser: argparse.ArgumentParser, cluster_required: bool) -> None:
    parser.add_argument("--cluster", type=Path, required=cluster_required, metavar="DIR",
                        help="directory of Kubernetes YAML manifests the cluster is read from"
                        + (" (required)" if cluster_required else "; without it, the cluster's API"))
    parser.add_argument("--config", type=Path, metavar="FILE", help="KGWE configuration file (YAML)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kgwe",
        description="KGWE, the Kubernetes GPU Workload Enhancer: admission webhooks, policies and a node agent.",
    )
    parser.add_argument("--log-level", choices=["debug", "info", "warning", "error"],
                        help="log verbosity (default: info for serve and agent, warning otherwise)")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    serve = commands.add_parser("serve", help="run the mutating and validating webhooks over HTTPS",
                                description="Run the webhooks. With --cluster the cluster is read from YAML files "
                                            "(reloaded on change); without it, from the Kubernetes API.")
    _add_cluster_and_config(serve, cluster_required=False)
    serve.add_argument("--host", default="0.0.0.0", help="address to listen on (default 0.0.0.0)")
    serve.add_argument("--port", type=int, default=8443, help="port to listen on (default 8443)")
    serve.add_argument("--tls-cert-file", type=Path, metavar="FILE",
                       help="serving certificate (PEM); reloaded when the file changes")
    serve.add_argument("--tls-private-key-file", type=Path, metavar="FILE", help="its private key (PEM)")
    serve.add_argument("--no-ui", action="store_true", help="do not serve the web UI")
    serve.add_argument("--opa-url", metavar="URL",
                       help="evaluate Rego on the OPA server at URL (http:// or https://), as policies.regoEngine: "
                            "opa with policies.opaUrl would; CEL policies stay in process")
    serve.add_argument("--cluster-poll-seconds", type=float, default=2.0, metavar="S",
                       help="with --cluster: how often the directory is read for changes (default 2)")
    serve.add_argument(
        "--workers", type=int, default=None, metavar="N",
        help="worker processes (default: with --cluster one per usable CPU, at most 4; in a cluster 1, "
        "scale with replicas)",
    )

    review = commands.add_parser("review", help="offline: what the webhooks would answer for a CREATE of a pod",
                                 description="Send a pod or workload (Deployment, Job, JobSet, ...; every document "
                                             "of a multi-document file) through the mutating webhook, apply its "
                                             "patch, and send the result through the validating webhook; the exit "
                                             "status is 0 whether or not it is allowed (--exit-code: 1 when refused). "
                                             "-o json prints one object, or a JSON array of one object per document "
                                             "for several.")
    review.add_argument("pod", type=Path, metavar="FILE", help="the pod or workload manifest(s)")
    _add_cluster_and_config(review, cluster_required=True)
    review.add_argument("--user", default="kgwe-review", help="the requesting user (default kgwe-review)")
    review.add_argument("--group", action="append", default=[], metavar="G",
                        help="a group of the user (repeatable; system:authenticated is always added)")
    review.add_argument("-o", "--output", choices=["text", *FORMATS], default="text", help="output format")
    review.add_argument("--exit-code", action="store_true", help=EXIT_CODE_HELP)

    review.add_argument("--explain", action="store_true",
                        help="also say why: the placement trace, each policy's result, each check (docs/explain.md)")

    from webhook.explain_cli import add_explain_parser  # `kgwe explain`

    add_explain_parser(commands, _add_cluster_and_config)

    for name, (_module, _style, help_text) in DELEGATED.items():
        commands.add_parser(name, help=help_text, add_help=False)

    completion = commands.add_parser(
        "completion", help="print a shell completion script: source <(kgwe completion bash)",
        description="Print the completion script for SHELL, generated from kgwe's own parsers. bash: "
                    "`source <(kgwe completion bash)` (or save it as "
                    "~/.local/share/bash-completion/completions/kgwe); zsh: `source <(kgwe completion zsh)` after "
                    "compinit (or save it as _kgwe in a directory of $fpath).")
    completion.add_argument("shell", choices=["bash", "zsh"], metavar="SHELL", help="bash or zsh")
    return parser


def _delegated_parser(name: str) -> argparse.ArgumentParser | None:
    """The parser a delegated command builds for itself, when its module says how; None otherwise."""
    module_name = DELEGATED[name][0]
    try:
        module = importlib.import_module(module_name)
    except ImportError:
        return None  # not in this installation: the command completes with no flags
    if module_name == "webhook.reports.commands":
        built: argparse.ArgumentParser = module.parser_for(name)
        return built
    builder = getattr(module, "build_parser", None)
    return builder() if callable(builder) else None


def cmd_completion(args: argparse.Namespace) -> int:
    from webhook.completion import CommandWords, script, words_of

    parser = build_parser()
    subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    helps = {str(choice.dest): str(choice.help or "") for choice in subparsers._choices_actions}
    commands: dict[str, CommandWords] = {}
    for name, sub in subparsers.choices.items():
        own = _delegated_parser(name) if name in DELEGATED else sub
        commands[name] = words_of(own, helps.get(name, "")) if own is not None else CommandWords(helps.get(name, ""))
    commands["policy"].subcommands = ["test"]
    print(script(args.shell, words_of(parser), commands))
    return 0


def cmd_review(args: argparse.Namespace) -> int:
    documents = read_documents(args.pod)
    check_directory(args.cluster)
    config = load_config(args.config)
    check_identity_key(config)
    runtime = runtime_from_directory(config, args.cluster, args.owns_process)
    from webhook.review import render_text, review_document

    _add_claim_objects(runtime.store, documents)
    results = [
        review_document(runtime.admission, document, args.user, args.group, config.limits.deadline_seconds)
        for document in documents
    ]
    refused = 1 if args.exit_code and not all(result.allowed for result in results) else 0
    if getattr(args, "explain", False):
        from webhook.explain_cli import explain_documents

        return explain_documents(runtime, documents, args) or refused
    if args.output in FORMATS:
        body: Any = results[0].as_json() if len(results) == 1 else [r.as_json() for r in results]
        print(render(body, args.output))
    else:
        print("\n---\n".join(render_text(result) for result in results))
    return refused


def _add_claim_objects(store: Any, documents: list[Any]) -> None:
    """ResourceClaimTemplates and ResourceClaims in the reviewed file are what it creates beside its pods:
    the pods' review reads them as if they were in the cluster (docs/dra.md, "Claims a pod writes itself")."""
    added = False
    for document in documents:
        if isinstance(document, dict) and document.get("kind") in ("ResourceClaimTemplate", "ResourceClaim"):
            metadata = document.get("metadata")
            if isinstance(metadata, dict) and isinstance(metadata.get("name"), str):
                store.upsert({**document, "metadata": {"namespace": "default", **metadata}})
                added = True
    if added:
        store.snapshot(force=True)  # the reviews read the snapshot with them, not the one before


def cmd_serve(args: argparse.Namespace) -> int:
    if (args.tls_cert_file is None) != (args.tls_private_key_file is None):
        raise CommandError("give both --tls-cert-file and --tls-private-key-file, or neither")
    if args.cluster is not None and not args.cluster.is_dir():
        raise CommandError(f"--cluster {args.cluster}: not a directory")
    if args.workers is None:
        # Admission is CPU-bound and each worker is one event loop: one per core serves the most. In a
        # cluster the chart scales with replicas instead (each worker would watch the API on its own).
        args.workers = min(len(os.sched_getaffinity(0)), 4) if args.cluster is not None else 1
    if args.workers < 1:
        raise CommandError("--workers must be at least 1")
    if not args.cluster_poll_seconds > 0:
        raise CommandError("--cluster-poll-seconds must be more than 0")
    if args.workers == 1:
        return _serve_checked(args)
    # Several workers: prometheus-client's multiprocess mode re-executes this process (multiproc_metrics.py),
    # before the configuration and the engines load, so that they load once; the parent removes the metrics
    # directory it made when it stops, also when it cannot start.
    from webhook.server import multiproc_metrics

    multiproc_metrics.ensure_multiprocess_mode()
    try:
        return _serve_checked(args)
    except CommandError:
        multiproc_metrics.cleanup()
        raise


def _serve_checked(args: argparse.Namespace) -> int:
    config = load_config(args.config)
    if args.opa_url is not None:
        config = _with_opa_url(config, args.opa_url)
    check_identity_key(config)
    # The server and its engines, after the arguments are checked (as in cmd_review).
    from webhook.server.listener import ServeError
    from webhook.server.serving import ServeOptions, serve

    options = ServeOptions(
        config=config,
        config_file=args.config,
        cluster_dir=args.cluster,
        host=args.host,
        port=args.port,
        tls_cert_file=args.tls_cert_file,
        tls_key_file=args.tls_private_key_file,
        ui=not args.no_ui,
        workers=args.workers,
        cluster_poll_seconds=args.cluster_poll_seconds,
        log_level=args.log_level or "info",
    )
    try:
        return serve(options)
    except ServeError as exc:
        raise CommandError(str(exc)) from exc


def _with_opa_url(config: Config, url: str) -> Config:
    """`config` with Rego on the OPA server at `url` (the flag wins over the file, also on config reloads:
    the policy engine is chosen once, at start)."""
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise CommandError(f"--opa-url {url!r}: expected http://HOST[:PORT] or https://HOST[:PORT]")
    policies = config.policies.model_copy(update={"rego_engine": "opa", "opa_url": url})
    return config.model_copy(update={"policies": policies})


def run_delegated(command: str, argv: list[str]) -> int:
    module_name, style, _help = DELEGATED[command]
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name is not None and module_name.startswith(exc.name):
            print(f"kgwe {command}: not available in this installation ({module_name} is missing)", file=sys.stderr)
            return 2
        raise
    if command == "policy":
        if not argv or argv[0] in {"-h", "--help"}:
            print("usage: kgwe policy test [DIR] [options]\n\n"
                  "  test    run the Rego tests (*_test.rego) and CEL policy test cases in DIR")
            return 0 if argv else 2
        if argv[0] != "test":
            print(f"kgwe policy: unknown command {argv[0]!r} (expected: test)", file=sys.stderr)
            return 2
        argv = argv[1:]
    run: Callable[..., int] = module.run
    result = run(command, argv) if style == "command" else run(argv)
    return int(result or 0)


def _command_index(argv: list[str]) -> int | None:
    index = 0
    while index < len(argv):
        if argv[index] == "--log-level":
            index += 2
        elif argv[index].startswith("-"):
            index += 1
        else:
            return index
    return None


def main(argv: Sequence[str] | None = None) -> int:
    import logging

    args_list = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    # Delegated commands parse their own arguments (and --help).
    first = _command_index(args_list)
    if first is not None and args_list[first] in DELEGATED:
        top = parser.parse_args([*args_list[:first], "serve"])  # validates the global options only
        level = top.log_level or ("info" if args_list[first] == "agent" else "warning")
        logging.basicConfig(level=level.upper(), format="%(levelname)s %(name)s: %(message)s")
        return run_delegated(args_list[first], args_list[first + 1:])
    args = parser.parse_args(args_list)
    # Without argv, main is the process's entry (`kgwe`, `python -m webhook.cli`): the process ends with the
    # command, which a one-shot command's heap may rely on (webhook/cluster/collector_pause.py built_once).
    args.owns_process = argv is None
    level = args.log_level or ("info" if args.command == "serve" else "warning")
    logging.basicConfig(level=level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from webhook.explain_cli import cmd_explain

    commands: dict[str, Callable[[argparse.Namespace], int]] = {
        "serve": cmd_serve, "review": cmd_review, "explain": cmd_explain, "completion": cmd_completion,
    }
    try:
        return commands[args.command](args)
    except CommandError as exc:
        print(f"kgwe {args.command}: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return _reader_went_away()


def _reader_went_away() -> int:
    """`kgwe review x -o yaml | head`: the reader stopped reading. Quiet, as kubectl is: no traceback, and
    nothing more written to the closed pipe when Python flushes at exit. 141 is a shell's status for SIGPIPE."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 141


if __name__ == "__main__":
    sys.exit(main())
