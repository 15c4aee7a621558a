"""prometheus-client's multiprocess mode for `kgwe serve --workers N` (N > 1): one scrape, every worker.

Each worker is a process with its own counters; without this a scrape of `/metrics` shows whichever
worker accepted the connection. In multiprocess mode every metric value lives in a memory-mapped file in
`PROMETHEUS_MULTIPROC_DIR`, and `/metrics` sums them (counters, histograms) or lists them per `pid`
(gauges, prometheus-client's default `all` mode) over every worker, dead ones' counters included.

prometheus-client picks where values live when it is imported, and `kgwe serve` imports it long before it
knows how many workers it runs. So the parent makes the directory, sets the variable and re-executes
itself (same PID, same arguments) before anything else happens; the parent removes the directory when it
exits. A directory the operator set (`PROMETHEUS_MULTIPROC_DIR` in the environment) is used as it is and
left in place. One worker (the default without `--cluster`) keeps the ordinary in-process registry.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import NoReturn

from prometheus_client import CollectorRegistry, generate_latest

from policies.kernel.published_families import MULTIPROC_ENV, published, withdraw_worker

# Marks a directory `kgwe serve` made itself (and so removes at exit), across the re-exec.
OWNED_ENV = "KGWE_OWNED_MULTIPROC_DIR"


def multiprocess_enabled() -> bool:
    return bool(os.environ.get(MULTIPROC_ENV))


def ensure_multiprocess_mode() -> None:
    """In the parent of several workers: return when multiprocess mode is on; otherwise turn it on and
    re-execute this process (does not return)."""
    if multiprocess_enabled():
        # The operator's directory, or ours after the re-exec: prometheus-client writes into it at once.
        os.makedirs(os.environ[MULTIPROC_ENV], exist_ok=True)
        return
    _reexec_with(tempfile.mkdtemp(prefix="kgwe-metrics-"))


def _reexec_with(directory: str) -> NoReturn:
    os.environ[MULTIPROC_ENV] = directory
    os.environ[OWNED_ENV] = directory
    sys.stdout.flush()
    sys.stderr.flush()
    # sys.orig_argv keeps `-m webhook.cli` or the console script, as the user started it.
    os.execv(sys.executable, [sys.executable, *sys.orig_argv[1:]])


def worker_exited(pid: int) -> None:
    """The parent's bookkeeping when a worker exits: its live gauges stop counting, its published families go."""
    if multiprocess_enabled():
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(pid)
        withdraw_worker(Path(os.environ[MULTIPROC_ENV]), pid)


def cleanup() -> None:
    """At the parent's exit: remove the directory it made (never one the operator set)."""
    owned = os.environ.get(OWNED_ENV)
    if owned and owned == os.environ.get(MULTIPROC_ENV):
        with contextlib.suppress(OSError):
            shutil.rmtree(owned)


def latest_parts() -> list[bytes]:
    """`latest()` in parts (metrics_parts.py): this process's families rendered one part at a time; in
    multiprocess mode the one body `latest()` makes."""
    if multiprocess_enabled():
        return [latest()]
    from webhook.server.metrics_parts import latest_parts as rendered_parts

    return rendered_parts()


def latest() -> bytes:
    """The `/metrics` body: every worker's metrics in multiprocess mode (with the families a worker renders for
    all, policies/kernel/published_families.py), this process's otherwise."""
    if not multiprocess_enabled():
        return generate_latest()
    from prometheus_client import multiprocess

    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry)
    return generate_latest(registry) + published(Path(os.environ[MULTIPROC_ENV]))
