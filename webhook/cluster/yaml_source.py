"""The embedded default cluster source: a directory of Kubernetes YAML manifests (SPEC section 6).

Local mode (`kgwe serve --cluster DIR`) reads the directory once at start and then polls it. An
editor saving a file, a half-copied file or a typo must not change what the webhook enforces behind
the operator's back, so the directory is tracked file by file:

- a file that reads, parses and holds only well-formed objects replaces that file's objects;
- a file that does not (unreadable, 0 bytes, invalid YAML, a document that is not a Kubernetes object,
  e.g. an empty `kind:`) keeps the objects of its last good version, and the error is logged once per
  version of the file, counted in `kgwe_cluster_directory_errors` and shown in `/readyz`;
- a deleted file drops its objects; a directory that disappears or cannot be listed keeps everything.

The store is marked loaded (and `/readyz` turns ready) only after a pass in which every file was good:
a directory whose first read already fails is never served as if it were the cluster. Afterwards a bad
edit keeps serving the last good model, reported as a problem but ready.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from policies.kernel.background import Task
from webhook.cluster.metrics import CLUSTER_DIRECTORY_ERRORS, CLUSTER_DIRECTORY_REFUSED
from webhook.cluster.model import ClusterStore

log = logging.getLogger("kgwe.cluster.yaml")
SUFFIXES = (".yaml", ".yml", ".json")
# Manifests are written by the operator, but a stray multi-gigabyte file must not exhaust the webhook.
# PyYAML's safe constructor over libyaml's parser where PyYAML was built with it (five times faster on a
# directory of manifests: most of what building a runtime from a directory costs); the pure-Python one otherwise.
_SAFE_LOADER: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
MAX_FILE_BYTES = 32 * 1024 * 1024
SOURCE_NAME = "cluster directory"


class ClusterDirectoryError(ValueError):
    pass


def _check_object(obj: Any, where: str) -> dict[str, Any]:
    """`obj` if it has the shape every consumer of the store relies on; ClusterDirectoryError otherwise."""
    if not isinstance(obj, dict):
        raise ClusterDirectoryError(f"{where}: a {type(obj).__name__}, not a Kubernetes object")
    kind = obj.get("kind")
    if not isinstance(kind, str) or not kind:
        raise ClusterDirectoryError(f"{where}: `kind` must be a non-empty string, not {kind!r}")
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        raise ClusterDirectoryError(f"{where}: {kind} has no `metadata` mapping")
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        raise ClusterDirectoryError(f"{where}: {kind} `metadata.name` must be a non-empty string, not {name!r}")
    namespace = meta.get("namespace")
    if namespace is not None and not isinstance(namespace, str):
        raise ClusterDirectoryError(f"{where}: {kind} {name} `metadata.namespace` must be a string")
    for field in ("labels", "annotations"):
        if meta.get(field) is not None and not isinstance(meta[field], dict):
            raise ClusterDirectoryError(f"{where}: {kind} {name} `metadata.{field}` must be a mapping")
    for field in ("spec", "status"):
        if obj.get(field) is not None and not isinstance(obj[field], dict):
            raise ClusterDirectoryError(f"{where}: {kind} {name} `{field}` must be a mapping")
    return obj


def parse_manifest_file(path: Path) -> list[dict[str, Any]]:
    """Every object of one manifest file (multi-document files and `List`s expanded), or ClusterDirectoryError
    naming the first thing wrong with it. Empty documents (`---` alone, comments) are skipped; an empty
    file is an error: it is far more often a file caught mid-write than an intended removal."""
    try:
        with open(path, "rb") as handle:
            raw = handle.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise ClusterDirectoryError(f"{path}: unreadable: {exc}") from exc
    if len(raw) > MAX_FILE_BYTES:
        raise ClusterDirectoryError(f"{path}: larger than {MAX_FILE_BYTES} bytes")
    if not raw.strip():
        raise ClusterDirectoryError(f"{path}: the file is empty (being written?); delete it to remove its objects")
    try:
        documents = list(yaml.load_all(raw.decode("utf-8"), Loader=_SAFE_LOADER))
    except UnicodeDecodeError as exc:
        raise ClusterDirectoryError(f"{path}: not UTF-8: {exc}") from exc
    except yaml.YAMLError as exc:
        raise ClusterDirectoryError(f"{path}: not valid YAML: {exc}") from exc
    objects: list[dict[str, Any]] = []
    for index, document in enumerate(documents):
        if document is None:
            continue
        where = f"{path} document {index + 1}"
        if isinstance(document, dict) and isinstance(document.get("kind"), str) and document["kind"].endswith("List"):
            items = document.get("items")
            if not isinstance(items, list):
                raise ClusterDirectoryError(f"{where}: {document['kind']} without an `items` list")
            objects.extend(_check_object(item, f"{where} item {n + 1}") for n, item in enumerate(items))
        else:
            objects.append(_check_object(document, where))
    return objects


def _manifest_paths(directory: Path) -> list[Path]:
    if not directory.is_dir():
        raise ClusterDirectoryError(f"cluster directory {directory} does not exist or is not a directory")
    return sorted(p for p in directory.rglob("*") if p.suffix in SUFFIXES and p.is_file())


def iter_manifests(directory: Path) -> Iterator[tuple[Path, dict[str, Any]]]:
    """Every object in every manifest file under `directory`; ClusterDirectoryError on the first bad file."""
    for path in _manifest_paths(directory):
        for obj in parse_manifest_file(path):
            yield path, obj


FileVersion = tuple[int, int, int]  # (inode, size, mtime in ns): a new version after any write or rename


@dataclass
class _FileState:
    version: FileVersion
    good: list[dict[str, Any]] | None  # objects of the last good version; None: never good
    error: str | None  # why the current version is refused


class YamlDirectorySource:
    """Loads a cluster directory into a store, and reloads it when a file changes (see the module doc)."""

    def __init__(self, directory: str | Path, store: ClusterStore, poll_seconds: float = 2.0) -> None:
        self.directory = Path(directory)
        self.store = store
        self.poll_seconds = poll_seconds
        self.task = Task("cluster-directory", self._poll, interval=poll_seconds, on_error=self._poll_failed)
        self._files: dict[Path, _FileState] = {}
        self._directory_error: str | None = None
        self._last_failure: str | None = None
        self._lock = threading.Lock()

    def load(self) -> int:
        """Read the whole directory now; ClusterDirectoryError if any file is bad (one-shot commands want to
        hear it). The good files are in the store either way."""
        count = self.refresh()
        problems = self.problems()
        if problems:
            raise ClusterDirectoryError("; ".join(problems))
        return count

    def refresh(self) -> int:
        """One tolerant pass: re-read changed files, keep the last good content of bad ones; never raises for a
        bad file. Returns the number of objects served."""
        with self._lock:
            try:
                paths = _manifest_paths(self.directory)
                versions = {p: _version(p) for p in paths}
            except (OSError, ClusterDirectoryError) as exc:
                if self._directory_error != str(exc):
                    log.error("%s %s cannot be listed, keeping the last good model: %s", SOURCE_NAME,
                              self.directory, exc)
                    CLUSTER_DIRECTORY_REFUSED.inc()
                self._directory_error = str(exc)
                self._publish()
                return sum(len(s.good or ()) for s in self._files.values())
            if self._directory_error is not None:
                log.info("%s %s can be listed again", SOURCE_NAME, self.directory)
            self._directory_error = None
            changed = set(self._files) != {p for p, v in versions.items() if v is not None}
            files: dict[Path, _FileState] = {}
            for path, version in versions.items():
                if version is None:
                    continue  # deleted between the listing and the stat
                previous = self._files.get(path)
                if previous is not None and previous.version == version:
                    files[path] = previous
                    continue
                files[path] = self._read(path, version, previous)
                changed = True
            self._files = files
            objects = [obj for state in files.values() for obj in state.good or ()]
            if changed:
                self.store.replace_all(objects)
                log.info("loaded %d objects from %s", len(objects), self.directory)
            if not self.store.loaded and all(s.error is None for s in files.values()):
                self.store.mark_loaded()
            self._publish()
            return len(objects)

    def _read(self, path: Path, version: FileVersion, previous: _FileState | None) -> _FileState:
        good = previous.good if previous is not None else None
        try:
            objects = parse_manifest_file(path)
        except ClusterDirectoryError as exc:
            CLUSTER_DIRECTORY_REFUSED.inc()
            kept = "keeping its last good version" if good is not None else "it has no good version yet"
            log.error("%s: file refused, %s: %s", SOURCE_NAME, kept, exc)
            return _FileState(version, good, str(exc))
        if previous is not None and previous.error is not None:
            log.info("%s: %s is good again", SOURCE_NAME, path)
        return _FileState(version, objects, None)

    def problems(self) -> list[str]:
        """What is wrong right now, one line each (empty when every file is good)."""
        found = [self._directory_error] if self._directory_error else []
        for state in self._files.values():
            if state.error is not None:
                served = "serving its last good version" if state.good is not None else "not served"
                found.append(f"{state.error} ({served})")
        return found

    def _publish(self) -> None:
        problems = self.problems()
        CLUSTER_DIRECTORY_ERRORS.set(len(problems))
        self.store.set_source_problems(SOURCE_NAME, problems)

    def start(self) -> None:
        """Read the directory (tolerantly: a bad file leaves the store unready, not the process dead) and
        poll it every `poll_seconds` (the `cluster-directory` task)."""
        if not self.directory.is_dir():
            raise ClusterDirectoryError(f"cluster directory {self.directory} does not exist or is not a directory")
        if not self.store.loaded:
            self.refresh()
        self.task.start()

    def stop(self, timeout: float = 5.0) -> None:
        self.task.stop(timeout)

    @property
    def alive(self) -> bool:
        return self.task.state().running

    def _poll(self) -> None:
        self.refresh()
        self._last_failure = None

    def _poll_failed(self, exc: Exception) -> None:
        # The poller outlives any failure; the last good model stays. Each distinct failure is logged once.
        message = f"{type(exc).__name__}: {exc}"
        if message != self._last_failure:
            log.exception("%s reload failed, keeping the last good model", SOURCE_NAME)
        self._last_failure = message
        try:
            self.store.set_source_problems(SOURCE_NAME, [*self.problems(), f"reload failed: {message}"])
        except Exception:  # publishing is best effort; the next pass tries again
            log.debug("could not publish the reload failure", exc_info=True)


def _version(path: Path) -> FileVersion | None:
    try:
        stat = os.stat(path)
    except FileNotFoundError:
        return None
    return (stat.st_ino, stat.st_size, stat.st_mtime_ns)
