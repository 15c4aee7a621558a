"""`--workers N`: worker 0 speaks for the startup every worker shares; the others add only their own trouble."""

from __future__ import annotations

import logging

from webhook.server.worker_logs import LEADER_LOGGER, SecondaryWorkerFilter


def _record(name: str, level: int, message: str) -> logging.LogRecord:
    return logging.LogRecord(name, level, __file__, 1, message, None, None)


def test_secondary_worker_drops_the_repeated_startup_and_info_lines() -> None:
    quiet = SecondaryWorkerFilter(2)
    assert not quiet.filter(_record("kgwe.server.callers", logging.WARNING, "authentication is OFF"))
    assert quiet.filter(_record("kgwe.server", logging.ERROR, "cannot load"))
    quiet.started()
    assert not quiet.filter(_record("kgwe.audit", logging.INFO, "audit pass done"))
    passed = _record("kgwe.admission", logging.WARNING, "deadline passed")
    assert quiet.filter(passed)
    assert passed.getMessage() == "worker 2: deadline passed"
    assert quiet.filter(passed) and passed.getMessage() == "worker 2: deadline passed"  # prefixed once


def test_leadership_lines_pass_in_every_worker() -> None:
    quiet = SecondaryWorkerFilter(1)
    assert quiet.filter(_record(LEADER_LOGGER, logging.INFO, "pod-x is now leader"))
