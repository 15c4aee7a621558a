"""Local mode's cluster directory goes bad while `kgwe serve --cluster DIR` runs: an empty file caught mid-write,
invalid YAML, a document with an empty `kind:`, a deleted file. The server keeps serving over HTTPS, each bad
file keeps its last good objects (the quotas stay enforced), `/readyz` says what is wrong, and the reload
thread lives on to pick up the fix. A directory that is bad from the start is never ready."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from fault_support import CLUSTER, Served, gpu_pod
from prometheus_client import REGISTRY
from waiting import eventually

from webhook.cluster.model import ClusterStore
from webhook.cluster.yaml_source import ClusterDirectoryError, YamlDirectorySource
from webhook.config import Config

QUOTAS = "tenant-quotas.yaml"
EMPTY_KIND = "apiVersion: v1\nkind:\nmetadata:\n  name: oops\n"
# Each edit below waits for the next read of the directory: at the default 2 s the waits were most of the file's
# time; what is read is the same at any interval.
POLL = ("--cluster-poll-seconds", "0.1")


@pytest.fixture
def directory(tmp_path: Path) -> Path:
    copy = tmp_path / "cluster"
    shutil.copytree(CLUSTER, copy)
    return copy


@pytest.fixture
def served(directory: Path, tmp_path: Path) -> Iterator[Served]:
    server = Served(directory, tmp_path / "state", *POLL)
    try:
        eventually(server.up, 120, "kgwe serve listening")
        yield server
    finally:
        server.stop()


def test_bad_files_keep_their_last_good_objects_and_readyz_says_so(served: Served, directory: Path) -> None:
    assert served.readyz() == (200, {"status": "ready"})
    assert served.quotas_of("team-a") == ["team-a"]
    good_quotas = (directory / QUOTAS).read_text()

    # 0 bytes (an editor truncating before it writes): the quotas stay.
    (directory / QUOTAS).write_bytes(b"")
    eventually(lambda: "the file is empty" in served.problems(), 30, "the empty file reported")
    status, body = served.readyz()
    assert status == 200 and body["status"] == "ready", "a later bad edit keeps serving the last good model"
    assert QUOTAS in served.problems() and "serving its last good version" in served.problems()
    assert served.quotas_of("team-a") == ["team-a"], "a 0-byte file dropped its TenantQuotas"

    # Half written: invalid YAML. Still the last good quotas.
    (directory / QUOTAS).write_text(good_quotas[: good_quotas.index("limits:") + 12] + "{acceleratorType: [")
    eventually(lambda: "not valid YAML" in served.problems(), 30, "the invalid YAML reported")
    assert served.quotas_of("team-a") == ["team-a"]

    # A new file with an empty `kind:` (it killed the reload thread once).
    (directory / "extra.yaml").write_text(EMPTY_KIND)
    eventually(lambda: "`kind` must be a non-empty string" in served.problems(), 30, "the empty kind reported")
    assert "extra.yaml" in served.problems() and "not served" in served.problems()

    # The reload thread is alive: fixing the quota file takes effect, with a visible change.
    (directory / QUOTAS).write_text(good_quotas.replace("name: team-a\n", "name: team-a-v2\n", 1))
    eventually(lambda: served.quotas_of("team-a") == ["team-a-v2"], 30, "the fixed quota file loaded")
    assert "not valid YAML" not in served.problems()

    # Deleting a file drops its objects (and its problem).
    (directory / "extra.yaml").unlink()
    eventually(lambda: served.readyz() == (200, {"status": "ready"}), 30, "the problems cleared")
    (directory / QUOTAS).unlink()
    eventually(lambda: served.quotas_of("team-a") == [], 30, "a deleted file's quotas dropped")
    assert served.process.poll() is None


def test_quota_is_enforced_while_its_file_is_broken(served: Served, directory: Path) -> None:
    # team-a: 8 H100s, 4 held by train-llm-0. 5 more is over the limit, with the file good or broken: the pod is
    # admitted behind the quota gate, told it waits; 9 could never run and is refused.
    over = gpu_pod("over", "nvidia-h100-80gb", gpus=5)
    first = served.validate(over)
    assert first["allowed"] and any("team-a: nvidia-h100-80gb 4 of 8 GPUs in use" in w for w in first["warnings"])
    (directory / QUOTAS).write_bytes(b"")
    eventually(lambda: "the file is empty" in served.problems(), 30, "the empty file reported")
    again = served.validate(gpu_pod("over-again", "nvidia-h100-80gb", gpus=5))
    assert again["allowed"] and any("team-a: nvidia-h100-80gb 4 of 8 GPUs in use" in w for w in again["warnings"])


def test_a_directory_bad_from_the_start_is_not_ready(directory: Path, tmp_path: Path) -> None:
    (directory / "nodes-broken.yaml").write_text("kind: Node\nmetadata: {name: [\n")
    server = Served(directory, tmp_path / "state", *POLL)
    try:
        eventually(server.up, 120, "kgwe serve listening")
        status, body = server.readyz()
        assert status == 503 and body["status"] == "not ready"
        assert "cluster model not loaded yet" in body["reasons"]
        assert any("nodes-broken.yaml" in p and "not valid YAML" in p for p in body["problems"])
        (directory / "nodes-broken.yaml").unlink()
        eventually(lambda: server.readyz()[0] == 200, 30, "ready once every file is good")
    finally:
        errors = server.stop()
    assert "Traceback" not in errors


def directory_errors() -> float:
    return REGISTRY.get_sample_value("kgwe_cluster_directory_errors") or 0.0


def test_source_in_process_metric_and_one_log_line_per_version(directory: Path,
                                                                caplog: pytest.LogCaptureFixture) -> None:
    config = Config()
    store = ClusterStore(config.accelerator_table(), min_rebuild_interval=0.0)
    source = YamlDirectorySource(directory, store, poll_seconds=3600)
    source.load()
    assert store.loaded and directory_errors() == 0
    before = len(store.objects("TenantQuota"))
    (directory / QUOTAS).write_text("kind: TenantQuota\nmetadata: [not, a, mapping]\n")
    for _ in range(3):
        source.refresh()
    assert directory_errors() == 1
    assert len(store.objects("TenantQuota")) == before
    logged = [r for r in caplog.records if QUOTAS in r.getMessage() and "refused" in r.getMessage()]
    assert len(logged) == 1, "one log line per version of a bad file, not one per poll"
    with pytest.raises(ClusterDirectoryError, match="metadata"):
        source.load()  # one-shot commands (kgwe review, audit) still hear about it
    (directory / QUOTAS).unlink()
    source.refresh()
    assert directory_errors() == 0 and store.objects("TenantQuota") == []
    assert store.source_problems() == []


@pytest.mark.parametrize("seconds", ["0", "-1", "nan"])
def test_a_poll_interval_that_is_not_positive_is_refused(seconds: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    from webhook.cli import main

    monkeypatch.setenv("KGWE_STATE_DIR", str(tmp_path / "state"))
    assert main(["serve", "--cluster", str(CLUSTER), "--workers", "1", "--cluster-poll-seconds", seconds]) == 2
    assert capsys.readouterr().err.strip() == "kgwe serve: --cluster-poll-seconds must be more than 0"
    assert not (tmp_path / "state").exists()  # refused before anything is made
