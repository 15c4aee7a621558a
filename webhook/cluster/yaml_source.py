"""The embedded default cluster source: a directory of Kubernetes YAML manifests (SPEC section 6)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from webhook.cluster.model import ClusterStore

log = logging.getLogger("kgwe.cluster.yaml")
SUFFIXES = (".yaml", ".yml", ".json")


class ClusterDirectoryError(ValueError):
    pass


def iter_manifests(directory: Path) -> Iterator[tuple[Path, dict[str, Any]]]:
    """Every object in every YAML file under `directory` (multi-document files and `List`s expanded)."""
    if not directory.is_dir():
        raise ClusterDirectoryError(f"cluster directory {directory} does not exist or is not a directory")
    for path in sorted(p for p in directory.rglob("*") if p.suffix in SUFFIXES and p.is_file()):
        try:
            documents = list(yaml.safe_load_all(path.read_text(encoding="utf-8")))
        except yaml.YAMLError as exc:
            raise ClusterDirectoryError(f"{path}: not valid YAML: {exc}") from exc
        for document in documents:
            if not isinstance(document, dict):
                continue
            if document.get("kind", "").endswith("List") and isinstance(document.get("items"), list):
                for item in document["items"]:
                    if isinstance(item, dict):
                        yield path, item
            else:
                yield path, document


def _fingerprint(directory: Path) -> tuple[tuple[str, float, int], ...]:
    return tuple(
        (str(p), p.stat().st_mtime, p.stat().st_size)
        for p in sorted(directory.rglob("*"))
        if p.suffix in SUFFIXES and p.is_file()
    )


class YamlDirectorySource:
    """Loads a cluster directory into a store, and reloads it when a file changes."""

    def __init__(self, directory: str | Path, store: ClusterStore, poll_seconds: float = 2.0) -> None:
        self.directory = Path(directory)
        self.store = store
        self.poll_seconds = poll_seconds
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._fingerprint: tuple[tuple[str, float, int], ...] = ()

    def load(self) -> int:
        objects = [obj for _path, obj in iter_manifests(self.directory)]
        self.store.replace_all(objects)
        self.store.mark_loaded()
        self._fingerprint = _fingerprint(self.directory)
        log.info("loaded %d objects from %s", len(objects), self.directory)
        return len(objects)

    def start(self) -> None:
        if not self.store.loaded:
            self.load()
        self._thread = threading.Thread(target=self._watch, name="kgwe-yaml-source", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _watch(self) -> None:
        while not self._stop.wait(self.poll_seconds):
            try:
                if _fingerprint(self.directory) != self._fingerprint:
                    self.load()
            except (OSError, ClusterDirectoryError) as exc:
                # Keep serving the last good model: a half-written file must not empty the cluster.
                log.warning("cluster directory reload failed, keeping the last good model: %s", exc)
