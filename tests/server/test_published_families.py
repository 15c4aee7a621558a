"""Families a worker renders for every worker's scrape in multiprocess mode (policies/kernel/published_families.py):
the scrape gets each name's block once, the newer where leadership passed, and nothing of a worker that left."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from policies.kernel.published_families import publish, published, withdraw_worker

OLD = b"# TYPE kgwe_pod_hourly_cost gauge\nkgwe_pod_hourly_cost{pod=\"a\"} 1.0\n"
NEW = b"# TYPE kgwe_pod_hourly_cost gauge\nkgwe_pod_hourly_cost{pod=\"b\"} 2.0\n"


def test_each_name_is_exported_once_the_newer_block_where_two_workers_wrote_one(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
    (tmp_path / "kgwe-families-pod-costs-1.prom").write_bytes(OLD)  # a former leader's, older
    os.utime(tmp_path / "kgwe-families-pod-costs-1.prom", (1, 1))
    publish("pod-costs", NEW)
    publish("other", b"# TYPE kgwe_other gauge\nkgwe_other 1.0\n")
    assert published(tmp_path) == b"# TYPE kgwe_other gauge\nkgwe_other 1.0\n" + NEW

    publish("pod-costs", b"")  # this worker stopped leading: the former leader's block is all there is
    assert published(tmp_path).endswith(OLD)
    withdraw_worker(tmp_path, 1)  # and that worker exited
    assert b"pod_hourly_cost" not in published(tmp_path)
    assert not list(tmp_path.glob(".*partial"))


def test_nothing_is_written_outside_multiprocess_mode(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PROMETHEUS_MULTIPROC_DIR", raising=False)
    monkeypatch.chdir(tmp_path)
    publish("pod-costs", NEW)
    assert list(tmp_path.iterdir()) == []
