"""Issue 17's side-by-side, as it was measured: wrk, 16 keep-alive HTTPS connections, AdmissionReview bodies
as the API server sends them, `kgwe serve` with its default workers, against a one-process no-op FastAPI
handler on the same stack measured in the same run.

wrk is a C load generator: it leaves the server more of a small machine's CPUs than the Python client of
`bench_serve` does, so these rows are the ones to hold against Gatekeeper's figures (issue 17 measured
Gatekeeper v3.21's `/v1/admit` with wrk at 1,698-1,770 req/s on this kind of machine). Each request gets a
uid of its own (a Lua script cycles through the bodies and writes a counter into the placeholder), and the
script counts the answers that refuse, so a row says whether it timed admissions or refusals.

Skipped, with the reason, where `wrk` is not on PATH (`apt-get install wrk`).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_admission  # siblings of this script
import bench_serve
import soak

CONNECTIONS = 16
RESULT_MARK = "KGWE-WRK-RESULT "

# Bodies are read from files at start; each request splices a 36-character counter (thread, number) into
# the uid placeholder. `response` counts refusals and answers that are not AdmissionReviews.
_LUA = r"""
-- Globals, not locals: wrk reads a thread's counts with thread:get, which sees only globals.
bodies, count, thread_id, counter, refused, malformed, received = {}, 0, 0, 0, 0, 0, 0
local threads = {}

function setup(thread)
  thread:set("thread_id", #threads + 1)
  table.insert(threads, thread)
end

function init(args)
  local placeholder = args[2]
  check = args[1] == "check"
  for i = 3, #args do
    local file = assert(io.open(args[i], "rb"))
    local text = file:read("*a")
    file:close()
    local target = string.match(text, "^([^\n]*)\n")
    local body = string.sub(text, #target + 2)
    local at = assert(string.find(body, placeholder, 1, true))
    table.insert(bodies, {target, string.sub(body, 1, at - 1), string.sub(body, at + #placeholder)})
  end
  count = #bodies
  counter = thread_id * 7919
end

function request()
  counter = counter + 1
  local b = bodies[(counter % count) + 1]
  local uid = string.format("%08d-%027d", thread_id, counter)
  return wrk.format("POST", b[1], {["Content-Type"] = "application/json"}, b[2] .. uid .. b[3])
end

function response(status, headers, body)
  received = received + #body
  if status >= 400 then
    return  -- wrk counts these itself (non-2xx)
  end
  if status ~= 200 or (check and not string.find(body, '"uid"', 1, true)) then
    malformed = malformed + 1
  elseif string.find(body, '"allowed":false', 1, true) then
    refused = refused + 1
  end
end

function done(summary, latency, requests)
  local refused_all, malformed_all, received_all = 0, 0, 0
  for _, thread in ipairs(threads) do
    refused_all = refused_all + thread:get("refused")
    malformed_all = malformed_all + thread:get("malformed")
    received_all = received_all + thread:get("received")
  end
  io.write(string.format(
    "KGWE-WRK-RESULT {\"requests\": %d, \"duration_us\": %d, \"p50_us\": %d, \"p90_us\": %d, " ..
    "\"p99_us\": %d, \"max_us\": %d, \"mean_us\": %.1f, \"connect_errors\": %d, \"read_errors\": %d, " ..
    "\"write_errors\": %d, \"timeouts\": %d, \"non_2xx\": %d, \"refused\": %d, \"malformed\": %d, " ..
    "\"received\": %d}\n",
    summary.requests, summary.duration, latency:percentile(50), latency:percentile(90),
    latency:percentile(99), latency.max, latency.mean, summary.errors.connect, summary.errors.read,
    summary.errors.write, summary.errors.timeout, summary.errors.status, refused_all, malformed_all, received_all))
end
"""


def wrk_path() -> str | None:
    return shutil.which("wrk")


def drive(port: int, bodies: list[tuple[str, bytes]], seconds: float, *, warmup: float = 1.0,
          threads: int = 2, check: bool = True, connections: int = CONNECTIONS,
          cpus: set[int] | None = None, after_warmup: Callable[[], None] | None = None) -> dict[str, Any]:
    """wrk against https://127.0.0.1:`port` for `seconds` (after a `warmup` run that is not counted), cycling
    through `bodies` ((path, body with soak.UID_PLACEHOLDER)); the summary wrk's `done` writes. With `check`,
    an answer that is not an AdmissionReview for its request counts as an error. `cpus` pins wrk;
    `after_warmup` is called between the warm-up run and the measured one."""
    wrk = wrk_path()
    if wrk is None:
        raise RuntimeError("wrk is not on PATH")
    with tempfile.TemporaryDirectory(prefix="kgwe-wrk-") as tmp:
        script = Path(tmp) / "kgwe.lua"
        script.write_text(_LUA)
        files = []
        for index, (path, body) in enumerate(bodies):
            file = Path(tmp) / f"body-{index}"
            file.write_bytes(path.encode() + b"\n" + body)
            files.append(str(file))
        result: dict[str, Any] = {}
        for measured, length in ((False, warmup), (True, seconds)):
            if measured and after_warmup is not None:
                after_warmup()
            command = [
                wrk, "-t", str(threads), "-c", str(connections), "-d", f"{max(1, round(length))}s", "--timeout", "10s",
                "-s", str(script), f"https://127.0.0.1:{port}", "--", "check" if check else "any", soak.UID_PLACEHOLDER,
                *files,
            ]
            output = subprocess.run(command, capture_output=True, text=True, timeout=length + 60,
                                    preexec_fn=soak.pinned_to(cpus)).stdout
            found = re.search(re.escape(RESULT_MARK) + r"(\{.*\})", output)
            if found is None:
                raise RuntimeError(f"wrk printed no result:\n{output[-2000:]}")
            result = json.loads(found.group(1))
    seconds_run = result["duration_us"] / 1e6
    errors = sum(result[k] for k in ("connect_errors", "read_errors", "write_errors", "timeouts", "non_2xx",
                                     "malformed"))
    return {
        "requests": result["requests"],
        "req_per_s": result["requests"] / seconds_run if seconds_run else 0.0,
        "p50_ms": result["p50_us"] / 1000,
        "p90_ms": result["p90_us"] / 1000,
        "p99_ms": result["p99_us"] / 1000,
        "max_ms": result["max_us"] / 1000,
        "mean_ms": result["mean_us"] / 1000,
        "errors": errors,
        "refused_share": result["refused"] / result["requests"] if result["requests"] else 0.0,
        # Bodies only (no HTTP headers): a request's is the mean of the bodies wrk cycles through, the uid the
        # placeholder's length; an answer's what the script read (answers in flight at the end are a few).
        "request_bytes": sum(len(body) for _path, body in bodies) / len(bodies),
        "response_bytes": result["received"] / result["requests"] if result["requests"] else 0.0,
    }


def _noop(seconds: float, body: bytes) -> dict[str, Any]:
    """The no-op FastAPI route of the admission bench, one process, uvicorn over TLS on KGWE's stack, sent
    `body`."""
    from certs.authority import Settings
    from certs.files import ensure_files

    with tempfile.TemporaryDirectory(prefix="kgwe-bench-") as tmp:
        paths, _ = ensure_files(Path(tmp), Settings())
        os.environ["KGWE_BENCH_PIN"] = "0"  # unpinned, as the other rows: wrk and the server share the CPUs
        try:
            process, port = bench_admission._start(bench_admission._serve_webhook, str(paths.directory), True, False)
        finally:
            os.environ.pop("KGWE_BENCH_PIN", None)
        try:
            return drive(port, [("/noop", body)], seconds, check=False)
        finally:
            bench_admission._stop(process)


def _serve(bodies: list[tuple[str, bytes]], seconds: float, extra_args: tuple[str, ...] = ()) -> dict[str, Any]:
    """`kgwe serve` with its default workers."""
    with soak.kgwe_serve(workers=None, extra_args=extra_args) as server:
        return drive(server.port, bodies, seconds)


def worker_counts(server_cpus: int) -> list[int]:
    """1, 2, 4, ... up to the CPUs the server has, that number last."""
    counts = [1]
    while counts[-1] * 2 <= server_cpus:
        counts.append(counts[-1] * 2)
    return counts if counts[-1] == server_cpus else [*counts, server_cpus]


def bench_workers(seconds: float = 5.0) -> dict[str, Any]:
    """`/validate` with issue 17's three admin Rego policies at 1, 2, 4, ... workers. Where there are four
    CPUs or more, the server has the first half and wrk the second (one thread per CPU, four connections
    per worker and at least 16), so that the curve is the server's; on fewer, they share every CPU."""
    if wrk_path() is None:
        raise ModuleNotFoundError("wrk is not installed (apt-get install wrk)", name="wrk")
    usable = sorted(os.sched_getaffinity(0))
    split = len(usable) >= 4
    server_cpus = set(usable[:len(usable) // 2]) if split else set(usable)
    client_cpus = set(usable[len(usable) // 2:]) if split else set(usable)
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="kgwe-bench-") as tmp:
        config = bench_serve._three_policy_config(Path(tmp))
        bodies = bench_serve._admitted_validate_bodies(config)
        for workers in worker_counts(len(server_cpus)):
            connections = max(CONNECTIONS, 4 * workers)
            with soak.kgwe_serve(workers=workers, extra_args=("--config", str(config)),
                                 cpus=server_cpus if split else None) as server:
                row = drive(server.port, bodies, seconds, threads=min(len(client_cpus), connections),
                            connections=connections, cpus=client_cpus if split else None)
            rows.append({"workers": workers, "connections": connections, **row})
    one = rows[0]["req_per_s"]
    for row in rows:
        row["vs_one_worker"] = row["req_per_s"] / one if one else 0.0
    return {
        "name": "workers_scaling_wrk",
        "setup": f"kgwe serve --cluster examples/cluster --workers N, /validate with the three admin Rego policies, "
                 f"wrk over TLS; {len(usable)} CPUs, "
                 + (f"server pinned to {len(server_cpus)}, wrk to {len(client_cpus)}" if split else "shared"),
        "cpus": len(usable),
        "rows": rows,
    }


def bench_wrk(seconds: float = 6.0) -> dict[str, Any]:
    """The no-op route, then `kgwe serve` (default workers) `/mutate` and `/validate` over every example pod,
    and `/validate` with issue 17's three admin Rego policies, each driven by wrk."""
    if wrk_path() is None:
        raise ModuleNotFoundError("wrk is not installed (apt-get install wrk)", name="wrk")
    every = soak.request_bodies()
    results: dict[str, Any] = {
        "name": "wrk_side_by_side",
        "setup": f"wrk -t2 -c{CONNECTIONS} over TLS on 127.0.0.1, unique uid per request; kgwe serve --cluster "
                 "examples/cluster with its default workers; the baseline is the admission bench's no-op "
                 "FastAPI route, one process",
        "noop": _noop(seconds, next(b for p, b in every if p.startswith("/mutate"))),
        "mutate": _serve([b for b in every if b[0].startswith("/mutate")], seconds),
        "validate": _serve([b for b in every if b[0].startswith("/validate")], seconds),
    }
    with tempfile.TemporaryDirectory(prefix="kgwe-bench-") as tmp:
        config = bench_serve._three_policy_config(Path(tmp))
        admitted = bench_serve._admitted_validate_bodies(config)
        results["validate_three_admin_policies"] = _serve(admitted, seconds, ("--config", str(config)))
    noop = results["noop"]["req_per_s"]
    for name in ("mutate", "validate", "validate_three_admin_policies"):
        results[f"{name}_vs_noop_req_per_s"] = results[name]["req_per_s"] / noop if noop else 0.0
    return results


if __name__ == "__main__":
    if sys.argv[1:2] == ["workers"]:
        print(json.dumps(bench_workers(float(sys.argv[2]) if len(sys.argv) > 2 else 5.0), indent=2))
    else:
        print(json.dumps(bench_wrk(float(sys.argv[1]) if len(sys.argv) > 1 else 6.0), indent=2))
