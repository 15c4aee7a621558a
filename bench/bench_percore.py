"""Issue 36's per-core comparison: requests per server core and p99 of `kgwe serve --workers 1` `/validate` and
`/mutate` against the one-process no-op FastAPI route, in one run, with the ratio to the no-op.

Both servers are one process pinned to the same CPU; the load generator (wrk where installed, else the admission
bench's asyncio client) is pinned to the others, 16 keep-alive HTTPS connections, a uid per request, every
answer checked. Both servers stay up for the whole run and the rounds interleave (no-op, /validate, /mutate,
no-op, ...), so that what else the machine does hits each row alike.

"Per server core" is answers per CPU second the server process spent (user + system, from /proc, its
background threads included): on a machine shared with other work the server's wall-clock rate follows the
share of the CPU it got, its CPU per answer does not. The wall-clock rate is reported too. Each row is the
median of the rounds, with the lowest and highest round beside it.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_admission  # siblings of this script
import bench_wrk
import soak

ROUNDS = 5
CONNECTIONS = 16
# Issue 36's goal: each endpoint at least this share of the no-op's requests per server core, p99 no higher.
GOAL_VS_NOOP = 0.8


def _cpu_split() -> tuple[set[int], set[int]]:
    """(server CPUs, load generator CPUs): the first usable CPU for the server, the rest for the client."""
    usable = sorted(os.sched_getaffinity(0))
    if len(usable) < 2:
        return set(usable), set(usable)
    return {usable[0]}, set(usable[1:])


def _process_counters(pid: int) -> dict[str, float] | None:
    """What the server has spent so far (Linux): user and system CPU seconds and minor faults of the whole process
    (/proc/PID/stat), and the voluntary and involuntary context switches of its threads alive now
    (/proc/PID/task/*/status; a thread that has ended takes its switches with it), the event loop's apart."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    tick = os.sysconf("SC_CLK_TCK")
    counters = {"user_s": int(fields[11]) / tick, "system_s": int(fields[12]) / tick, "minor_faults": int(fields[7]),
                "voluntary": 0.0, "involuntary": 0.0, "loop_voluntary": 0.0, "loop_involuntary": 0.0}
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return counters
    for task in tasks:
        try:
            status = task.joinpath("status").read_text()
        except OSError:
            continue
        for line in status.splitlines():
            key, _, value = line.partition(":")
            kind = {"voluntary_ctxt_switches": "voluntary", "nonvoluntary_ctxt_switches": "involuntary"}.get(key)
            if kind is not None:
                counters[kind] += int(value)
                if task.name == str(pid):  # the main thread: uvicorn's event loop
                    counters[f"loop_{kind}"] += int(value)
    return counters


def _cpus_busy_seconds(cpus: set[int]) -> float | None:
    """CPU seconds the given CPUs have spent busy so far, whoever ran (/proc/stat: user, nice, system, irq,
    softirq, steal)."""
    try:
        lines = Path("/proc/stat").read_text().splitlines()
    except OSError:
        return None
    ticks = 0
    for line in lines:
        name, *fields = line.split()
        if name.startswith("cpu") and name[3:].isdigit() and int(name[3:]) in cpus:
            ticks += sum(int(fields[i]) for i in (0, 1, 2, 5, 6, 7))
    return ticks / os.sysconf("SC_CLK_TCK")


class _CpuClock:
    """The server's CPU seconds from `start` (called after the warm-up) to `stop`; `spent` holds the counters
    beside them, and, given the server's `cpus`, how busy those CPUs were with other work meanwhile."""

    def __init__(self, pid: int, cpus: set[int] | None = None) -> None:
        self.pid = pid
        self.cpus = cpus
        self.started: dict[str, float] | None = None
        self.spent: dict[str, float] | None = None

    def _read(self) -> dict[str, float] | None:
        counters = _process_counters(self.pid)
        busy = _cpus_busy_seconds(self.cpus) if self.cpus else None
        if counters is not None and busy is not None:
            counters["cpus_busy_s"] = busy
        if counters is not None:
            counters["wall_s"] = time.monotonic()
        return counters

    def start(self) -> None:
        self.started = self._read()

    def stop(self) -> float | None:
        now = self._read()
        if now is None or self.started is None:
            return None
        started = self.started
        self.spent = {key: now[key] - started[key] for key in now if key in started}
        return self.spent["user_s"] + self.spent["system_s"]


def _wrk_driver(port: int, bodies: list[tuple[str, bytes]], seconds: float, check: bool, client: set[int],
                clock: _CpuClock) -> dict[str, Any]:
    return bench_wrk.drive(port, bodies, seconds, warmup=1.0, threads=max(1, min(len(client), 2)), check=check,
                           connections=CONNECTIONS, cpus=client, after_warmup=clock.start)


def _python_driver(port: int, ca_file: Path, bodies: list[tuple[str, bytes]], seconds: float, check: bool,
                   clock: _CpuClock) -> dict[str, Any]:
    """Where wrk is missing: the admission bench's asyncio client in this process (pinned by the caller), every
    body to the first one's path (each list holds one endpoint's bodies), each body with a uid of its own."""
    path = bodies[0][0]
    payloads = [b.replace(soak.UID_PLACEHOLDER.encode(), f"{n:036d}".encode()) for n, (_p, b) in enumerate(bodies)]
    checker: Callable[[bytes], bool] = bench_admission._admission_ok if check else bench_admission._any
    run = bench_admission._run(bench_admission._drive(port, ca_file, path, payloads, seconds, checker, CONNECTIONS,
                                                      clock.start))
    summary: dict[str, Any] = run.summary()
    return summary


def _measure(pid: int, drive: Callable[[_CpuClock], dict[str, Any]], cpus: set[int] | None = None
             ) -> dict[str, Any]:
    """One run of `drive`, with the server's CPU seconds over its measured part (after the warm-up); `cpus`, the
    CPUs the server is pinned to, to say what share of them other work took meanwhile."""
    clock = _CpuClock(pid, cpus)
    result = drive(clock)
    cpu_seconds = clock.stop()
    spent = clock.spent
    result["server_cpu_seconds"] = cpu_seconds
    result["req_per_server_core"] = result["requests"] / cpu_seconds if cpu_seconds else None
    if spent and result["requests"]:
        # Per answer: where the CPU went (user or kernel) and what callgrind cannot see (switches, faults).
        requests = result["requests"]
        result["user_us_per_request"] = spent["user_s"] / requests * 1e6
        result["system_us_per_request"] = spent["system_s"] / requests * 1e6
        for key in ("minor_faults", "voluntary", "involuntary", "loop_voluntary", "loop_involuntary"):
            result[f"{key}_per_request"] = spent[key] / requests
    if spent and cpus and "cpus_busy_s" in spent and spent["wall_s"] > 0:
        # What else the guest ran on the server's CPU: a round's CPU per request may rise with it, so a row says
        # how contended its rounds were (docs/performance.md, "The thirteenth round": the spread came mostly from
        # outside the guest's view).
        others = spent["cpus_busy_s"] - spent["user_s"] - spent["system_s"]
        result["others_share_of_server_cpus"] = max(0.0, others / spent["wall_s"] / len(cpus))
    return result


def _summary(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {"rounds": len(rounds), "errors": sum(r.get("errors", 0) for r in rounds)}
    for key in ("req_per_server_core", "req_per_s", "p50_ms", "p99_ms", "user_us_per_request",
                "system_us_per_request", "minor_faults_per_request", "voluntary_per_request",
                "involuntary_per_request", "loop_voluntary_per_request", "loop_involuntary_per_request",
                "request_bytes", "response_bytes", "others_share_of_server_cpus"):
        values = [r[key] for r in rounds if r.get(key) is not None]
        if values:
            out[key] = statistics.median(values)
            out[f"{key}_range"] = [min(values), max(values)]
    return out


def bench_percore(seconds: float = 4.0, rounds: int = ROUNDS) -> dict[str, Any]:
    """`rounds` interleaved rounds of `seconds` each: no-op, /validate, /mutate."""
    from certs.authority import Settings
    from certs.files import ensure_files

    server_cpus, client_cpus = _cpu_split()
    use_wrk = shutil.which("wrk") is not None
    every = soak.request_bodies()
    validate = [b for b in every if b[0].startswith("/validate")]
    mutate = [b for b in every if b[0].startswith("/mutate")]
    # The no-op reads the same bodies (it answers a fixed small document without looking at them).
    noop = [("/noop", body) for _path, body in every]
    restore = os.sched_getaffinity(0)
    results: dict[str, Any] = {
        "name": "per_core",
        "setup": f"one server process each, pinned to CPU {sorted(server_cpus)}; "
                 + (f"wrk -c{CONNECTIONS}" if use_wrk else f"the admission bench's asyncio client, {CONNECTIONS} "
                    "connections") + f" pinned to CPUs {sorted(client_cpus)}, HTTPS keep-alive, a uid per request; "
                 f"{rounds} interleaved rounds of {seconds:g} s; req/s per server core = answers / server CPU seconds",
        "load_generator": "wrk" if use_wrk else "python-asyncio",
        "server_cpus": sorted(server_cpus),
        "client_cpus": sorted(client_cpus),
    }
    samples: dict[str, list[dict[str, Any]]] = {"noop": [], "validate": [], "mutate": []}
    with tempfile.TemporaryDirectory(prefix="kgwe-bench-") as tmp:
        paths, _ = ensure_files(Path(tmp), Settings())
        # _serve_webhook pins itself to the first usable CPU (bench_admission._pin(0)).
        noop_process, noop_port = bench_admission._start(bench_admission._serve_webhook, str(paths.directory), True,
                                                         False)
        try:
            with soak.kgwe_serve(cpus=server_cpus, workers=1) as server:
                assert noop_process.pid is not None
                plan: list[tuple[str, int, int, Path, list[tuple[str, bytes]], bool]] = [
                    ("noop", noop_process.pid, noop_port, paths.ca_cert, noop, False),
                    ("validate", server.process.pid, server.port, server.ca_file, validate, True),
                    ("mutate", server.process.pid, server.port, server.ca_file, mutate, True),
                ]
                if not use_wrk:
                    os.sched_setaffinity(0, client_cpus)
                for _round in range(rounds):
                    for name, pid, port, ca_file, bodies, check in plan:
                        drive: Callable[[_CpuClock], dict[str, Any]]
                        if use_wrk:
                            drive = partial(_wrk_driver, port, bodies, seconds, check, client_cpus)
                        else:
                            drive = partial(_python_driver, port, ca_file, bodies, seconds, check)
                        samples[name].append(_measure(pid, drive, server_cpus))
                        time.sleep(0.2)
        finally:
            os.sched_setaffinity(0, restore)
            bench_admission._stop(noop_process)
    for name, measured in samples.items():
        results[name] = {**_summary(measured), "each_round": measured}
    base = results["noop"]
    for name in ("validate", "mutate"):
        row = results[name]
        ratios = [r["req_per_server_core"] / n["req_per_server_core"]
                  for r, n in zip(samples[name], samples["noop"], strict=True)
                  if r.get("req_per_server_core") and n.get("req_per_server_core")]
        row["vs_noop_per_core"] = statistics.median(ratios) if ratios else None
        row["vs_noop_per_core_range"] = [min(ratios), max(ratios)] if ratios else None
        row["p99_vs_noop"] = row["p99_ms"] / base["p99_ms"] if base.get("p99_ms") else None
        row["goal_met"] = bool(ratios) and row["vs_noop_per_core"] >= GOAL_VS_NOOP and row["p99_ms"] <= base["p99_ms"]
    return results


if __name__ == "__main__":
    print(json.dumps(bench_percore(float(sys.argv[1]) if len(sys.argv) > 1 else 4.0), indent=2))
