"""Metric families one worker renders for the whole server in prometheus-client's multiprocess mode.

With several workers (`kgwe serve --workers N`, webhook/server/multiproc_metrics.py) a scrape reads only the
values the workers' metrics keep in `PROMETHEUS_MULTIPROC_DIR`, so a collector a worker registers itself (the
leader's per-pod cost series, webhook/controllers/bound_pods.py) was seen by no scrape: Prometheus never got
them, and costs over time had nothing to read. The worker that exports such families writes them here, in the
text format, and every worker's `/metrics` adds them: whichever worker answers the scrape, they come once.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
PREFIX = "kgwe-families-"
SUFFIX = ".prom"


def multiprocess_directory() -> Path | None:
    """The directory of multiprocess mode, or None in a process whose registry `/metrics` reads itself."""
    directory = os.environ.get(MULTIPROC_ENV)
    return Path(directory) if directory else None


def publish(name: str, body: bytes) -> None:
    """This worker's families `name`, rendered; an empty `body` withdraws them. Nothing outside multiprocess mode."""
    directory = multiprocess_directory()
    if directory is None:
        return
    path = directory / f"{PREFIX}{name}-{os.getpid()}{SUFFIX}"
    if not body:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        return
    partial = path.with_name(f".{path.name}.partial")  # a scrape reads a whole block or the last one
    partial.write_bytes(body)
    os.replace(partial, path)


def published(directory: Path) -> bytes:
    """Every name's block, in name order; where two workers wrote one (leadership passing between them) only the
    newer, so that no family is exported twice."""
    newest: dict[str, tuple[float, Path]] = {}
    for path in directory.glob(f"{PREFIX}*{SUFFIX}"):
        name = path.name[len(PREFIX):-len(SUFFIX)].rpartition("-")[0]
        try:
            written = path.stat().st_mtime
        except FileNotFoundError:
            continue
        if name not in newest or written > newest[name][0]:
            newest[name] = (written, path)
    blocks = []
    for name in sorted(newest):
        with contextlib.suppress(FileNotFoundError):
            blocks.append(newest[name][1].read_bytes())
    return b"".join(blocks)


def withdraw_worker(directory: Path, pid: int) -> None:
    """The blocks of a worker that exited: no scrape exports what nobody keeps current any more."""
    for path in directory.glob(f"{PREFIX}*-{pid}{SUFFIX}"):
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


__all__ = ["multiprocess_directory", "publish", "published", "withdraw_worker"]
