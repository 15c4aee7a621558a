"""How a report reads the cluster (a YAML directory or the Kubernetes API), and what the reports share.

The configuration, the runtime and the API client are imported when a command runs, not when its parser is
built.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from webhook.output import render

if TYPE_CHECKING:
    from webhook.runtime import Runtime


class CommandError(Exception):
    """A report cannot run as asked; the message says why (printed to stderr, exit status 2)."""


@dataclass
class Cluster:
    runtime: Runtime
    api_client: Any = None  # a kubernetes ApiClient when the cluster is read from the API


def read_cluster(args: argparse.Namespace) -> Cluster:
    from webhook import assembly
    from webhook.cluster.yaml_source import ClusterDirectoryError
    from webhook.config import ConfigError, load_config

    try:
        config = load_config(args.config)
    except (OSError, ConfigError) as exc:
        raise CommandError(f"configuration: {exc}") from exc
    if args.cluster is not None:
        if not args.cluster.is_dir():
            raise CommandError(f"--cluster {args.cluster}: not a directory")
        try:
            return Cluster(assembly.from_directory(config, args.cluster).runtime)
        except (OSError, ClusterDirectoryError) as exc:
            raise CommandError(f"--cluster {args.cluster}: {exc}") from exc
    return cluster_from_api(config, args.kubeconfig)


def cluster_from_api(config: Any, kubeconfig: str | None) -> Cluster:
    from webhook import assembly
    from webhook.cluster.kube_json import load_kube_client

    try:
        client = load_kube_client(kubeconfig)
    except Exception as exc:  # no kubeconfig, not in a pod: say how to run offline
        raise CommandError(f"cannot reach the Kubernetes API ({exc}); use --cluster DIR to read YAML files") from exc
    try:
        # Built after the store is loaded, so the cluster's GPUPolicy objects are compiled too.
        return Cluster(assembly.from_api(config, client, serving=False).runtime, client)
    except assembly.ClusterNotListed as exc:
        raise CommandError(str(exc)) from exc


def as_json(document: Any) -> str:
    return render(document, "json")


def as_csv(rows: list[list[str]]) -> str:
    import csv
    import io

    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerows(rows)
    return out.getvalue().rstrip("\n")


def parse_moment(text: str | None) -> float | None:
    if text is None:
        return None
    from datetime import datetime

    try:
        return float(text)
    except ValueError:
        pass
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        raise CommandError(f"--at {text!r}: expected RFC 3339 (2026-01-31T12:00:00Z) or unix seconds") from None


def checked_prometheus_url(url: str | None) -> str | None:
    """`--prometheus` as given, refused unless it is an http(s) URL."""
    if url is not None and not url.startswith(("http://", "https://")):
        raise CommandError(f"--prometheus {url!r}: expected http://HOST[:PORT] or https://HOST[:PORT]")
    return url
