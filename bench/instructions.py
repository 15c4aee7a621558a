"""Instructions per admission request, counted by valgrind's callgrind: a measure of a request's CPU that other work
on the machine does not move, for A/B comparisons of two source trees where timing one is noise.

    python bench/instructions.py endpoint ROOT [ROOT ...] [--endpoint validate|mutate] [--requests 190] [--named]
    python bench/instructions.py serve ROOT [ROOT ...] [--endpoint ...] [--seconds 20]
    python bench/instructions.py noop [--seconds 20]
    python bench/instructions.py bare [--seconds 20]

`endpoint`: the real `AdmissionEndpoint.answer` in one process over bench/soak.py's bodies (decode, the core,
render, JSON; no HTTP), counted over `--requests` requests after 400 of warm-up; `--named` gives each request's pod
a name, uid and creation time of its own, as the API server sends `/validate` a `generateName` pod (named and
stamped after mutating admission), where bench/soak.py's bodies are alike but for the request uid. `serve`: `kgwe
serve --workers 1` run from ROOT, counted while wrk drives it (4 connections, after 8 s of warm-up): the whole
server, HTTP and TLS included, less what the same server spends idle for as long (its background threads and
timers). `noop`: the per-core bench's no-op FastAPI route, counted the same way. `bare`: bench/bare_server.py
(uvloop, TLS and httptools answering a canned AdmissionReview), the floor under any HTTP layer, counted the same
way. Each ROOT's modules come first on the path (`git archive BASE | tar -x -C /tmp/base` for a base tree).
Instructions are not time (a cache miss costs more than an add), but the count repeats within 0.1 % (`endpoint`) and
about 2 % (`serve`: the TLS handshakes of the connections, spread over the requests the run answers), so a change of
a few percent shows. Needs valgrind (`apt-get install valgrind`), and wrk for `serve`, `noop` and `bare`.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

_BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(_BENCH))

import bench_wrk  # noqa: E402  (siblings of this script)
import soak  # noqa: E402

_VALGRIND = ["valgrind", "--tool=callgrind", "--instr-atstart=no"]


def _counted(out: Path) -> list[int]:
    """The instructions callgrind counted in each dump it wrote under `out`'s name, in the order written (a dump
    zeroes the counters: each holds what was counted since the one before)."""
    totals: list[tuple[int, int]] = []
    for dump in out.parent.glob(out.name + "*"):
        suffix = dump.name[len(out.name):].lstrip(".")
        order = int(suffix) if suffix.isdigit() else 1 << 30  # the file written at exit comes last
        counted = [int(line.split()[1]) for line in dump.read_text(errors="replace").splitlines()
                   if line.startswith(("summary:", "totals:"))]  # summary: 0 where counting began switched off
        totals.append((order, max(counted, default=0)))
    return [total for _order, total in sorted(totals)]


def _instrument(pid: int, on: bool) -> None:
    subprocess.run(["callgrind_control", "-i", "on" if on else "off", str(pid)], check=True, capture_output=True)


def in_process(root: Path, endpoint: str, requests: int, named: bool = False) -> dict[str, Any]:
    """`endpoint` of ROOT's tree, counted in one process (this script run again under callgrind)."""
    with tempfile.TemporaryDirectory(prefix="kgwe-instr-") as tmp:
        out = Path(tmp) / "callgrind.out"
        command = [*_VALGRIND, f"--callgrind-out-file={out}", sys.executable, __file__, "_child", str(root),
                   "--endpoint", endpoint, "--requests", str(requests), *(["--named"] if named else [])]
        subprocess.run(command, cwd=root, check=True, capture_output=True,
                       env={**os.environ, "PYTHONPATH": str(root), "PYTHONHASHSEED": "0"})
        return {"root": str(root), "endpoint": endpoint, "requests": requests, "named": named,
                "instructions_per_request": round(max(_counted(out)) / requests)}


def _named(body: bytes) -> bytes:
    """`body` with its pod (and the request) named after the uid placeholder: each request's pod its own name."""
    import orjson

    review = orjson.loads(body)
    name = "pod-" + soak.UID_PLACEHOLDER
    metadata = review["request"]["object"].setdefault("metadata", {})
    # What the API server stamps on a CREATE before validating admission (FillObjectMetaSystemFields).
    metadata.update(name=name, uid=soak.UID_PLACEHOLDER, creationTimestamp="2026-11-30T06:00:00Z")
    review["request"]["name"] = name
    return orjson.dumps(review)


def _child(root: Path, endpoint: str, requests: int, named: bool = False) -> None:
    """Under callgrind: warm up, then count `requests` answers of the real endpoint."""
    import asyncio
    import gc

    sys.path.insert(0, str(root))
    from webhook import assembly
    from webhook.config import load_config
    from webhook.server.admission_endpoint import AdmissionEndpoint

    runtime = assembly.from_directory(load_config(soak.CONFIG), soak.CLUSTER).runtime
    bodies = [body for path, body in soak.request_bodies() if path.startswith(f"/{endpoint}")]
    if named:
        bodies = [_named(body) for body in bodies]
    answering = AdmissionEndpoint(runtime, endpoint, endpoint == "mutate", None)
    scope = {"type": "http", "method": "POST", "path": f"/{endpoint}", "query_string": b"timeout=10s",
             "headers": [(b"content-type", b"application/json")], "client": ("127.0.0.1", 1), "extensions": {}}
    placeholder = soak.UID_PLACEHOLDER.encode()

    def batch(first: int, count: int) -> list[bytes]:
        return [bodies[n % len(bodies)].replace(placeholder, f"{first + n:036d}".encode()) for n in range(count)]

    async def answer(items: list[bytes]) -> None:
        for body in items:
            async def receive(body: bytes = body) -> dict[str, Any]:
                return {"type": "http.request", "body": body, "more_body": False}

            status, content = await answering.answer(scope, receive)
            if status != 200:
                raise RuntimeError(content.decode(errors="replace"))

    loop = asyncio.new_event_loop()
    loop.run_until_complete(answer(batch(0, 400)))
    measured = batch(10_000_000, requests)
    gc.collect()
    gc.freeze()  # as a serve worker does after start-up (settle_heap)
    _instrument(os.getpid(), True)
    loop.run_until_complete(answer(measured))
    _instrument(os.getpid(), False)


def _driven(command: list[str], cwd: Path, environment: dict[str, str], port_of: Any, bodies: list[tuple[str, bytes]],
            seconds: float, check: bool, out: Path) -> dict[str, Any]:
    process = subprocess.Popen(command, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=environment)
    try:
        port = port_of(process)
        started: list[float] = []

        def count() -> None:
            _instrument(process.pid, True)
            started.append(time.monotonic())

        result = bench_wrk.drive(port, bodies, seconds, warmup=8.0, threads=1, connections=4, check=check,
                                 after_warmup=count)
        _instrument(process.pid, False)
        counted_seconds = time.monotonic() - started[0]
        _dump(process.pid)
        # The same server idle as long again: what its background threads and timers spend per second, which the
        # run spent too whatever it answered (under valgrind a second is few requests).
        _instrument(process.pid, True)
        idle_started = time.monotonic()
        time.sleep(counted_seconds)
        _instrument(process.pid, False)
        idle_seconds = time.monotonic() - idle_started
        _dump(process.pid)
    finally:
        process.terminate()
        process.wait(120)
    measured, idle = _counted(out)[:2]
    answered = result["requests"]
    busy = measured - idle * counted_seconds / idle_seconds
    return {"requests": answered, "errors": result["errors"],
            "idle_instructions_per_second": round(idle / idle_seconds),
            "instructions_per_request": round(busy / answered) if answered else None,
            "with_idle_instructions_per_request": round(measured / answered) if answered else None}


def _dump(pid: int) -> None:
    subprocess.run(["callgrind_control", "-d", str(pid)], check=True, capture_output=True)


def served(root: Path, endpoint: str, seconds: float) -> dict[str, Any]:
    """`kgwe serve --workers 1` from ROOT's tree, counted while wrk drives `endpoint`."""
    from certs.authority import Settings
    from certs.files import ensure_files

    bodies = [b for b in soak.request_bodies() if b[0].startswith(f"/{endpoint}")]
    with tempfile.TemporaryDirectory(prefix="kgwe-instr-") as tmp:
        certs, _ = ensure_files(Path(tmp), Settings())
        port = soak._free_port()
        out = Path(tmp) / "callgrind.out"
        command = [*_VALGRIND, f"--callgrind-out-file={out}", sys.executable, "-m", "webhook.cli", "--log-level",
                   "warning", "serve", "--cluster", str(soak.CLUSTER), "--config", str(soak.CONFIG), "--host",
                   "127.0.0.1", "--port", str(port), "--tls-cert-file", str(certs.tls_cert), "--tls-private-key-file",
                   str(certs.tls_key), "--no-ui", "--workers", "1"]

        def ready(process: subprocess.Popen[bytes]) -> int:
            soak.START_SECONDS = 600.0  # start-up under valgrind is tens of times slower
            soak._wait_ready(soak.Server(process, port, certs.ca_cert, Path(tmp) / "none.log"))
            return port

        environment = {**os.environ, "PYTHONPATH": str(root.resolve()), "PYTHONHASHSEED": "0"}
        found = _driven(command, root, environment, ready, bodies, seconds, True, out)
        return {"root": str(root), "endpoint": endpoint, "mode": "serve", **found}


def _port_file_server(mode: str, script: list[str], bodies: list[tuple[str, bytes]], seconds: float, check: bool,
                      settle: float) -> dict[str, Any]:
    """A server run as `script CERT_DIR PORT_FILE` under callgrind, counted as `served` counts; `settle` seconds
    after it writes its port (a socket bound before it serves)."""
    from certs.authority import Settings
    from certs.files import ensure_files

    with tempfile.TemporaryDirectory(prefix="kgwe-instr-") as tmp:
        paths, _ = ensure_files(Path(tmp), Settings())
        port_file = Path(tmp) / "port"
        out = Path(tmp) / "callgrind.out"
        command = [*_VALGRIND, f"--callgrind-out-file={out}", sys.executable, *script, str(paths.directory),
                   str(port_file)]

        def ready(process: subprocess.Popen[bytes]) -> int:
            deadline = time.monotonic() + 600
            while not (port_file.exists() and port_file.read_text()):
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"the {mode} server did not start")
                time.sleep(0.5)
            time.sleep(settle)
            return int(port_file.read_text())

        environment = {**os.environ, "PYTHONPATH": str(_BENCH.parent), "PYTHONHASHSEED": "0"}
        found = _driven(command, _BENCH.parent, environment, ready, bodies, seconds, check, out)
        return {"mode": mode, **found}


def noop(seconds: float) -> dict[str, Any]:
    """The per-core bench's no-op route (bench_admission's app in one process), counted as `served` counts."""
    bodies = [("/noop", body) for _path, body in soak.request_bodies()]
    return _port_file_server("noop", [__file__, "_noop"], bodies, seconds, False, settle=5.0)


def bare(seconds: float) -> dict[str, Any]:
    """bench/bare_server.py, counted as `served` counts, driven with `/validate`'s bodies."""
    bodies = [b for b in soak.request_bodies() if b[0].startswith("/validate")]
    return _port_file_server("bare", [str(_BENCH / "bare_server.py")], bodies, seconds, True, settle=0.0)


class _PortFile:
    def __init__(self, path: str) -> None:
        self.path = path

    def put(self, port: int) -> None:
        Path(self.path).write_text(str(port))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("mode", choices=["endpoint", "serve", "noop", "bare", "_child", "_noop"])
    parser.add_argument("roots", nargs="*", default=["."])
    parser.add_argument("--endpoint", choices=["validate", "mutate"], default="validate")
    parser.add_argument("--requests", type=int, default=190)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--named", action="store_true", help="endpoint: each request's pod named on its own")
    args = parser.parse_args()
    if args.mode == "_child":
        _child(Path(args.roots[0]), args.endpoint, args.requests, args.named)
        return 0
    if args.mode == "_noop":
        import bench_admission

        bench_admission._serve_webhook(args.roots[0], True, False, _PortFile(args.roots[1]))
        return 0
    if args.mode == "noop":
        results = [noop(args.seconds)]
    elif args.mode == "bare":
        results = [bare(args.seconds)]
    elif args.mode == "serve":
        results = [served(Path(root), args.endpoint, args.seconds) for root in args.roots]
    else:
        results = [in_process(Path(root).resolve(), args.endpoint, args.requests, args.named) for root in args.roots]
    print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
