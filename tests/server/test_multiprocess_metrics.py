"""`kgwe serve --workers 2`: one scrape of /metrics shows every worker (prometheus-client multiprocess mode),
connections opened together reach both workers (SO_REUSEPORT), and the metrics directory `kgwe serve` made
for its workers is gone when it exits."""

from __future__ import annotations

import os
import re
import signal
import socket
import ssl
import subprocess
import sys
import time
from pathlib import Path

import httpx
from patience import WAIT_SECONDS
from server_support import CLUSTER, CONFIG, PODS, ROOT, RunningServer, ask, free_port, load_pod

from webhook.review import create_review

REQUESTS = 12


def _environment_of(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes()
    return dict(item.split("=", 1) for item in raw.decode(errors="replace").split("\0") if "=" in item)


def _wait_ready(server: RunningServer, process: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + 60
    while True:
        try:
            with server.client() as client:
                if client.get("/readyz").status_code == 200:
                    return
        except httpx.TransportError:
            pass
        assert process.poll() is None, process.stderr.read() if process.stderr else ""
        assert time.monotonic() < deadline, "kgwe serve never became ready"
        time.sleep(0.1)


def _samples(text: str, name: str) -> list[tuple[str, float]]:
    return [(m.group(1), float(m.group(2))) for m in re.finditer(rf"^{name}(\{{[^}}]*\}})? (\S+)$", text, re.M)]


def test_one_scrape_shows_every_worker_and_the_directory_is_removed(tmp_path: Path) -> None:
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "KGWE_STATE_DIR": str(tmp_path)}
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    command = [sys.executable, "-m", "webhook.cli", "serve", "--cluster", str(CLUSTER), "--config", str(CONFIG),
               "--host", "127.0.0.1", "--port", str(port), "--workers", "2", "--no-ui"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT)
    try:
        assert process.stdout is not None
        ca_file = Path(process.stdout.readline().rsplit("CA: ", 1)[1].strip())
        server = RunningServer(f"https://127.0.0.1:{port}", ca_file, ca_file.parent, None)  # type: ignore[arg-type]
        _wait_ready(server, process)
        directory = Path(_environment_of(process.pid)["PROMETHEUS_MULTIPROC_DIR"])
        assert directory.is_dir() and any(directory.glob("*.db"))
        review = create_review(load_pod(PODS[0]), "alice", [])
        for _ in range(REQUESTS):  # a new connection each: either worker may answer
            assert ask(server, "/mutate", review)["allowed"] is True
        with server.client() as client:
            text = client.get("/metrics").text
        # Both workers loaded their certificate: each one's gauge, by pid, in the one scrape.
        expiries = [(labels, value) for labels, value in _samples(text, "kgwe_certificate_expiry_timestamp_seconds")
                    if value > 0]
        assert len({labels for labels, _ in expiries}) >= 2, text
        # Counters are summed over the workers: every request counted once, whichever worker answered it.
        # Sixteen keep-alive connections opened at once, as the API server does: both workers get some.
        # (With one shared listening socket, all of them often went to one worker.)
        context = ssl.create_default_context(cafile=str(ca_file))
        held = [context.wrap_socket(socket.create_connection(("127.0.0.1", port)), server_hostname="127.0.0.1")
                for _ in range(16)]
        try:
            # Which worker holds each connection is settled (the kernel chose at the handshake); a worker counts
            # it only once its event loop has run the connection's set-up, which a busy machine may delay past
            # any fixed sleep: scrape until two count theirs, or the patience is spent.
            give_up = time.monotonic() + WAIT_SECONDS
            while True:
                with server.client() as client:
                    open_connections = _samples(client.get("/metrics").text, "kgwe_open_connections")
                counting = [labels for labels, value in open_connections if value > 0]
                if len(counting) >= 2 or time.monotonic() > give_up:
                    break
                time.sleep(0.1)
        finally:
            for connection in held:
                connection.close()
        assert len([labels for labels, value in open_connections if value > 0]) >= 2, open_connections
        answered = sum(value for labels, value in _samples(text, "kgwe_admission_requests_total")
                       if 'endpoint="mutate"' in labels)
        assert answered == REQUESTS
        # The leader's per-pod cost series, which no worker's multiprocess files hold: in the scrape of either
        # worker, once each (the example runs four GPU containers), each family described once.
        give_up = time.monotonic() + WAIT_SECONDS
        while True:
            with server.client() as client:
                text = client.get("/metrics").text
            costs = _samples(text, "kgwe_pod_hourly_cost")
            if costs or time.monotonic() > give_up:
                break
            time.sleep(0.2)
        assert len(costs) == len({labels for labels, _ in costs}) >= 4, text
        assert 'pod="train-llm-0"' in "".join(labels for labels, _ in costs)
        assert text.count("# TYPE kgwe_pod_hourly_cost gauge") == 1
    finally:
        process.terminate()
        assert process.wait(20) in (0, -signal.SIGTERM)
    assert not directory.exists()


# Run in a process of its own: prometheus-client picks its value store when first imported.
_REPLACE_SERIES = """
import warnings
warnings.simplefilter("error")  # the library's 'not implemented in multi-process mode' warning fails this
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.multiprocess import MultiProcessCollector
from policies.kernel.metrics import QUOTA_LIMIT, replace_series
from webhook.gangs.controller import WAITING_TOO_LONG
replace_series(QUOTA_LIMIT, {("team-a", "h100"): 8.0, ("team-b", "h100"): 4.0})
replace_series(QUOTA_LIMIT, {("team-a", "h100"): 6.0})  # team-b's quota was deleted
replace_series(WAITING_TOO_LONG, {("ml",): 2.0}, stale=0.0)
replace_series(WAITING_TOO_LONG, {}, stale=0.0)
registry = CollectorRegistry()
MultiProcessCollector(registry)
print(generate_latest(registry).decode())
"""


def test_series_that_went_are_cleared_in_multiprocess_mode_without_warnings(tmp_path: Path) -> None:
    """A deleted quota's limit may not freeze at its last value in a multi-worker scrape: the library cannot
    remove a series there, so it reads NaN (no value); a count that went reads 0."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PROMETHEUS_MULTIPROC_DIR": str(tmp_path)}
    result = subprocess.run([sys.executable, "-c", _REPLACE_SERIES], env=env, capture_output=True, text=True,
                            timeout=60, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    limits = dict(_samples(result.stdout, "kgwe_quota_limit"))
    assert [v for k, v in limits.items() if 'tenant="team-a"' in k] == [6.0]
    assert all(v != v for k, v in limits.items() if 'tenant="team-b"' in k)  # NaN
    assert [v for _k, v in _samples(result.stdout, "kgwe_gang_waiting_too_long")] == [0.0]
