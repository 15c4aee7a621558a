"""`kgwe explain` and `kgwe review --explain` (docs/explain.md)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from webhook.output import FORMATS, render

if TYPE_CHECKING:  # the engine is imported when a command runs, not for `kgwe --help` (docs/performance.md)
    from webhook.explain import Explanation


def add_explain_parser(commands: Any, add_cluster_and_config: Callable[[argparse.ArgumentParser, bool], None]) -> None:
    parser = commands.add_parser(
        "explain", help="why KGWE places, changes or refuses a pod, step by step",
        description="Explain a pod: the placement trace (each candidate accelerator type and what dropped it), "
                    "each policy and its result, each check of the validating webhook. TARGET is a pod file "
                    "(judged as a new pod, as `kgwe review` does) or NAMESPACE/NAME of an existing pod (judged as "
                    "it is, with what blocks it now when it is not bound). With --cluster DIR the cluster is the "
                    "YAML directory; without it, the cluster's API (kubeconfig as kubectl finds it), read-only. "
                    "Exit status 0, or with --exit-code 1 when KGWE refuses the pod.",
    )
    parser.add_argument("target", metavar="TARGET",
                        help="a pod manifest file (- for stdin), or NAMESPACE/NAME of an existing pod")
    add_cluster_and_config(parser, False)
    parser.add_argument("--user", default="kgwe-explain", help="the requesting user for a new pod")
    parser.add_argument("--group", action="append", default=[], metavar="G", help="a group of the user (repeatable)")
    parser.add_argument("-o", "--output", choices=["text", *FORMATS], default="text", help="output format")
    parser.add_argument("--exit-code", action="store_true", help=EXIT_CODE_HELP)


# One wording for review, explain and audit: a script tests the status the way it tests `git diff --exit-code`.
EXIT_CODE_HELP = ("exit 1 when KGWE refuses a pod (as git diff --exit-code), 0 when it allows every one; "
                  "errors are 2 either way")


def refused(explanation: Explanation) -> bool:
    """A new pod the webhooks refuse, or an existing one KGWE would refuse as it is now."""
    if explanation.allowed is not None:
        return not explanation.allowed
    return bool(explanation.refusals) or any("Deny:" in p.result for p in explanation.policies)


def _status(explanations: list[Explanation], args: argparse.Namespace) -> int:
    return 1 if getattr(args, "exit_code", False) and any(refused(e) for e in explanations) else 0


def _print(explanations: list[Explanation], output: str) -> None:
    from webhook.explain import render_text

    if output in FORMATS:
        body: Any = explanations[0].as_json() if len(explanations) == 1 else [e.as_json() for e in explanations]
        print(render(body, output))
    else:
        print("\n---\n".join(render_text(e) for e in explanations))


def explain_documents(runtime: Any, documents: list[dict[str, Any]], args: argparse.Namespace) -> int:
    """`kgwe review --explain`: each pod of the file explained as a new pod (other kinds: their review)."""
    from webhook.command_input import CommandError
    from webhook.explain import explain

    explanations = []
    for document in documents:
        if str(document.get("kind") or "Pod") != "Pod":
            raise CommandError(f"--explain explains pods; {document.get('kind')} templates are reviewed without it")
        explanations.append(explain(runtime.admission, document, user=args.user, groups=list(args.group),
                                    deadline_seconds=runtime.config.limits.deadline_seconds))
    _print(explanations, args.output)
    return _status(explanations, args)


def find_pod(runtime: Any, target: str) -> dict[str, Any] | None:
    """The pod NAMESPACE/NAME in the runtime's cluster model, or None."""
    model = runtime.store.snapshot()
    pod = model.pods.get(target)
    return dict(pod) if isinstance(pod, dict) else None


def cmd_explain(args: argparse.Namespace) -> int:
    from webhook.command_input import (
        CommandError,
        check_identity_key,
        load_config,
        read_documents,
        runtime_from_directory,
    )

    config = load_config(args.config)
    check_identity_key(config)
    if args.cluster is None:
        return _explain_in_cluster(args, config)
    runtime = runtime_from_directory(config, args.cluster, getattr(args, "owns_process", False))
    from webhook.explain import explain

    path = Path(args.target)
    if path.is_file() or args.target == "-":
        return explain_documents(runtime, read_documents(path), args)
    if args.target.count("/") != 1 or not all(args.target.split("/")):
        raise CommandError(f"{args.target}: no such file, and not NAMESPACE/NAME")
    pod = find_pod(runtime, args.target)
    if pod is None:
        raise CommandError(f"{args.target}: no such pod in {args.cluster}")
    found = explain(runtime.admission, pod, existing=True, deadline_seconds=config.limits.deadline_seconds)
    _print([found], args.output)
    return _status([found], args)


def _explain_in_cluster(args: argparse.Namespace, config: Any) -> int:
    """`kgwe explain` against the cluster's API: the model is listed as `kgwe serve` lists it, the pod is
    read whole (the model keeps pods slimmed). Nothing is written: new pods are explained as dry runs."""
    from kubernetes.config import ConfigException

    from webhook.command_input import CommandError, read_documents
    from webhook.explain import explain
    from webhook.server.serving import ServeOptions, assemble_runtime

    path = Path(args.target)
    documents = read_documents(path) if path.is_file() or args.target == "-" else None
    if documents is None and (args.target.count("/") != 1 or not all(args.target.split("/"))):
        raise CommandError(f"{args.target}: no such file, and not NAMESPACE/NAME")
    try:
        assembly = assemble_runtime(ServeOptions(config=config))
    except (ConfigException, OSError) as exc:
        raise CommandError(f"cannot reach a Kubernetes cluster ({exc}); give --cluster DIR for a YAML "
                           "directory, or set KUBECONFIG") from exc
    try:
        runtime = assembly.runtime
        if documents is not None:
            return explain_documents(runtime, documents, args)
        namespace, name = args.target.split("/")
        pod = _read_pod(assembly.api_client, namespace, name)
        if pod is None:
            raise CommandError(f"{args.target}: no such pod in the cluster")
        found = explain(runtime.admission, pod, existing=True, deadline_seconds=config.limits.deadline_seconds)
        _print([found], args.output)
        return _status([found], args)
    finally:
        assembly.stop_source()


def _read_pod(api_client: Any, namespace: str, name: str) -> dict[str, Any] | None:
    from kubernetes import client as k8s
    from kubernetes.client.rest import ApiException

    try:
        pod = k8s.CoreV1Api(api_client).read_namespaced_pod(name, namespace, _request_timeout=10)
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise
    body: dict[str, Any] = api_client.sanitize_for_serialization(pod)
    return body
