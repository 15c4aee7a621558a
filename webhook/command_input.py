"""What `kgwe review` and `kgwe explain` both read before they run: the manifests, the configuration and the
identity key, and the error a user's mistake raises. Its own module so that the two commands share it without
importing each other."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the model is imported when a command runs, not for `kgwe --help` (docs/performance.md)
    from webhook.config import Config
    from webhook.runtime import Runtime


class CommandError(Exception):
    """A user error: printed to stderr, exit status 2."""


STDIN = Path("-")


def load_config(path: Path | None) -> Config:
    from webhook.config import ConfigError
    from webhook.config import load_config as load

    try:
        return load(path)
    except (OSError, ConfigError) as exc:
        raise CommandError(f"configuration: {exc}") from exc


def read_documents(path: Path) -> list[dict[str, Any]]:
    """The manifests of a (multi-document) YAML file, in order; a `kind: List` is expanded. `-` is standard
    input (`kubectl get pod x -o yaml | kgwe review -`)."""
    import yaml

    try:
        text = sys.stdin.read() if path == STDIN else path.read_text(encoding="utf-8")
        documents = [d for d in yaml.safe_load_all(text) if d is not None]
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise CommandError(f"cannot read {'standard input' if path == STDIN else path}: {exc}") from exc
    manifests: list[dict[str, Any]] = []
    for document in documents:
        items = document.get("items") if isinstance(document, dict) and document.get("kind") == "List" else [document]
        for item in items if isinstance(items, list) else []:
            if not isinstance(item, dict) or not item.get("kind"):
                raise CommandError(f"{path}: every document must be a Kubernetes manifest with a kind")
            manifests.append(item)
    if not manifests:
        raise CommandError(f"{path}: no manifest found")
    return manifests


def check_identity_key(config: Config) -> None:
    """The requested-by signing key is read (or made) before serving: without it no workload is admitted."""
    from webhook.identity_key import IdentityKeyError, load_key

    try:
        load_key(config.workloads.identity_key_file)
    except IdentityKeyError as exc:
        raise CommandError(str(exc)) from exc


def check_directory(cluster: Path) -> None:
    """--cluster names a directory: said before the configuration and the engines load."""
    if not cluster.is_dir():
        raise CommandError(f"--cluster {cluster}: not a directory")


def runtime_from_directory(config: Config, cluster: Path, owns_process: bool) -> Runtime:
    """The runtime a one-shot command reads from the YAML files of `cluster`. A process that exits with its answer
    (`owns_process`) has no one to read its metrics (policies/kernel/metric_kinds.py `unscraped`) and builds its
    heap once (webhook/cluster/collector_pause.py `built_once`); a caller in a longer process keeps both."""
    check_directory(cluster)
    from webhook.cluster.collector_pause import built_once

    if owns_process:
        from policies.kernel.metric_kinds import unscraped

        unscraped()
    with built_once(owns_process):
        from webhook import assembly  # the engines, once the input is checked: a mistake is told before they load

        try:
            return assembly.from_directory(config, cluster).runtime
        except (OSError, ValueError) as exc:
            raise CommandError(f"--cluster {cluster}: {exc}") from exc
