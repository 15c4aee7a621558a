"""Local mode's quota state file fails: its lock is held by another process past the admission deadline, or
the file is corrupt. Either way the quota cannot be checked, so a pod that the quota governs is never admitted
on the strength of a store that did not answer; a corrupt file is left exactly as it was for the operator."""

from __future__ import annotations

import logging
import subprocess
import sys
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path

import pytest
from fault_support import CLUSTER, Webhook, gpu_pod
from prometheus_client import REGISTRY

from policies.quota.check import QuotaService
from policies.quota.file_store import FileQuotaStore
from policies.quota.model import PodCharge
from policies.quota.store import QuotaStatus, QuotaUnavailable
from webhook.config import Config
from webhook.runtime import build_runtime

# Holds an exclusive flock of the lock file until its stdin closes, as a stuck worker process would.
HOLDER = """
import fcntl, sys
handle = open(sys.argv[1], "a+b")
fcntl.flock(handle, fcntl.LOCK_EX)
print("locked", flush=True)
sys.stdin.read()
"""


def store_errors(reason: str) -> float:
    return REGISTRY.get_sample_value("kgwe_quota_store_errors_total", {"reason": reason}) or 0.0


@pytest.fixture
def state_file(tmp_path: Path) -> Path:
    return tmp_path / "quota" / "8443-1.json"


@pytest.fixture
def lock_held(state_file: Path) -> Iterator[subprocess.Popen[str]]:
    state_file.parent.mkdir(parents=True, exist_ok=True)
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, f"{state_file}.lock"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
    try:
        yield holder
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(timeout=10)


def webhook_on(state_file: Path) -> Webhook:
    # onError deny: today's refusal path for an unavailable quota store on /validate (GPU pods refuse on any
    # internal error once the admission core fails closed; the store only has to raise).
    config = Config.model_validate({"limits": {"onError": "deny"}})
    return Webhook(build_runtime(config, CLUSTER, quota_store=FileQuotaStore(state_file)))


def charge(name: str) -> PodCharge:
    return PodCharge(namespace="team-a", name=name, uid=None, candidate_types=("nvidia-h100-80gb",),
                     bound_type=None, profile=None, gpu_equivalents=Decimal(1), gpu_memory_bytes=None)


def test_lock_held_past_the_deadline_refuses(state_file: Path, lock_held: subprocess.Popen[str]) -> None:
    webhook = webhook_on(state_file)
    before = store_errors("lock_timeout")
    pod = webhook.mutated(gpu_pod("blocked", "nvidia-h100-80gb"), timeout="2s")[1]
    answer = webhook.ask("validate", pod, timeout="300ms")
    assert not answer["allowed"]
    assert "quota could not be checked" in answer["status"]["message"]
    assert "locked by another worker" in answer["status"]["message"]
    assert store_errors("lock_timeout") > before
    # Without a deadline the wait is still bounded: nothing blocks forever behind a stuck process.
    with pytest.raises(QuotaUnavailable, match="stayed locked"):
        FileQuotaStore(state_file, max_lock_wait=0.05).read("team-a")


def test_lock_released_admits_again(state_file: Path) -> None:
    webhook = webhook_on(state_file)
    pod = webhook.mutated(gpu_pod("free", "nvidia-h100-80gb"))[1]
    assert webhook.ask("validate", pod)["allowed"]
    reserved = FileQuotaStore(state_file).read("team-a")
    assert [r.pod for r in reserved.status.reservations] == ["team-a/free"]


@pytest.mark.parametrize("content", [b"", b'{"team-a": {"version": 3, "status": {"reserv', b"[1, 2]",
                                     b'{"team-a": {"version": "x"}}', b"\xff\xfe garbage"])
def test_corrupt_file_refuses_and_is_kept(state_file: Path, content: bytes, caplog: pytest.LogCaptureFixture) -> None:
    webhook = webhook_on(state_file)
    state_file.parent.mkdir(parents=True, exist_ok=True)
    state_file.write_bytes(content)
    before = store_errors("corrupt")
    caplog.set_level(logging.ERROR, logger="kgwe.quota.file")
    for name in ("one", "two"):
        pod = webhook.mutated(gpu_pod(name, "nvidia-h100-80gb"))[1]
        answer = webhook.ask("validate", pod)
        assert not answer["allowed"], "a corrupt quota file must not read as 'no reservations'"
        assert "is corrupt" in answer["status"]["message"]
    assert state_file.read_bytes() == content, "the corrupt file was overwritten: its reservations are lost"
    assert store_errors("corrupt") > before
    logged = [r for r in caplog.records if "is corrupt" in r.getMessage()]
    assert len(logged) == 1, "one log line per corrupt version of the file, not one per request"
    assert str(state_file) in logged[0].getMessage()
    # The operator moves the file aside: checks work again.
    state_file.rename(state_file.with_name("quarantined.json"))
    pod = webhook.mutated(gpu_pod("after", "nvidia-h100-80gb"))[1]
    assert webhook.ask("validate", pod)["allowed"]


def test_service_raises_instead_of_admitting(state_file: Path) -> None:
    # The layer under the webhook: the quota check itself raises, whatever the webhook does with it.
    state_file.parent.mkdir(parents=True, exist_ok=True)
    state_file.write_bytes(b"{not json")
    service = QuotaService(FileQuotaStore(state_file), lambda _t: None, 60.0)
    quota = {"metadata": {"name": "team-a"},
             "spec": {"tenant": "team-a", "namespaces": ["team-a"],
                      "limits": [{"acceleratorType": "nvidia-h100-80gb", "gpus": 8}]}}
    with pytest.raises(QuotaUnavailable, match="corrupt"):
        service.check(charge("p"), "team-a", [quota], [], dry_run=False, deadline=None)


def test_writes_are_whole_files(state_file: Path) -> None:
    store = FileQuotaStore(state_file)
    first = store.read("q")
    assert store.write("q", QuotaStatus(), first.version)
    assert not store.write("q", QuotaStatus(), first.version), "a stale version must not write"
    assert store.read("q").version == "1"
    leftovers = [p.name for p in state_file.parent.iterdir() if p.name.endswith(".tmp")]
    assert leftovers == []
