"""Logging of `kgwe serve --workers N`: every line once, not once per worker.

All workers start from the same configuration and cluster, so their startup says the same things;
worker 0 speaks for all of them. The other workers keep what only they can know: warnings and errors
from the requests they serve, after startup, each prefixed with the worker's number, and leadership
changes (in a cluster each worker is its own Lease candidate and only one wins). With `--log-level
debug` nothing is dropped: whoever asks for debug output wants every process's.
"""

from __future__ import annotations

import logging

LEADER_LOGGER = "kgwe.controllers.leader"


class SecondaryWorkerFilter(logging.Filter):
    """Drops, in a worker other than the first, what the first one already logs.

    Until `started()`: everything below ERROR (startup lines repeat worker 0's). After: lines below
    WARNING. Leadership lines always pass. Passed lines are prefixed with `worker N: `."""

    def __init__(self, index: int) -> None:
        super().__init__()
        self.index = index
        self.starting = True

    def started(self) -> None:
        self.starting = False

    def filter(self, record: logging.LogRecord) -> bool:
        if record.name != LEADER_LOGGER:
            floor = logging.ERROR if self.starting else logging.WARNING
            if record.levelno < floor:
                return False
        if not getattr(record, "_kgwe_worker_prefixed", False):
            record.msg = f"worker {self.index}: {record.msg}"
            record._kgwe_worker_prefixed = True  # type: ignore[attr-defined]
        return True


_installed: SecondaryWorkerFilter | None = None


def quiet_secondary_worker(index: int, log_level: str) -> str:
    """Install the filter in worker `index` (no-op for worker 0 and for debug level); return the level
    uvicorn's own loggers should use in this worker (its startup lines are INFO)."""
    global _installed
    if index == 0 or log_level == "debug":
        return log_level
    _installed = SecondaryWorkerFilter(index)
    for handler in logging.getLogger().handlers:
        handler.addFilter(_installed)
    return "warning" if log_level == "info" else log_level


def worker_started() -> None:
    """Startup is over in this worker: its warnings are its own from now on."""
    if _installed is not None:
        _installed.started()
