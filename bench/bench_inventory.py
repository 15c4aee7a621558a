"""`GET /api/v1/hardware-profiles` at 1,000 and 10,000 generated nodes, 1 and 100 concurrent clients.

The server is the real application (`create_app` + `api_router`, uvicorn, plain HTTP on 127.0.0.1) over
a generated cluster (bench/generate_cluster.py: nodes of 13 realistic pools, ~60% of their GPUs taken
by bound pods, pending pods, 11 hardware profiles), in its own process. The baseline measured in the
same run, on the same server, is `/healthz` (a fixed body): the ratio says what the inventory API adds
on top of the HTTP stack. The load generator is raw asyncio HTTP/1.1 keep-alive (one connection per
client). Also measured in process: the per-snapshot precompute (`Inventory`) that a background thread
pays once per cluster change, and whether 100 concurrent callers got identical bodies.

Run: `.venv/bin/python bench/bench_inventory.py [--sizes 1000,10000] [--seconds 2] [--rounds 3]` (prints
JSON; `--out FILE` also writes it; bench/results/inventory.json is a recorded run).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

_ROOT = Path(__file__).resolve().parents[1]
for _path in (_ROOT, _ROOT / "bench"):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

from generate_cluster import generate_cluster  # noqa: E402

import webhook.assembly  # noqa: E402,F401  (it registers the wings in the core's seams)
from webhook.cluster.model import ClusterStore  # noqa: E402
from webhook.config import Config, load_config  # noqa: E402

CONFIG = _ROOT / "examples" / "config.yaml"
PROFILES = "/api/v1/hardware-profiles"
BASELINE = "/healthz"
SIZES = (1_000, 10_000)
CLIENTS = 100


def _store(config: Config, nodes: int) -> ClusterStore:
    store = ClusterStore(config.accelerator_table(), config.topology_staleness_seconds, config.gpu_taint_keys)
    store.replace_all(generate_cluster(nodes))
    store.mark_loaded()
    return store


def _pin(cpu_index: int) -> None:
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    if len(cpus) >= 2 and os.environ.get("KGWE_BENCH_PIN", "1") != "0":
        os.sched_setaffinity(0, {cpus[cpu_index % len(cpus)]})


# -- server (child process) ----------------------------------------------------------------------------


def _serve(nodes: int, ports: Any) -> None:
    _pin(0)
    import logging
    import socket

    import uvicorn

    from webhook.runtime import build_runtime
    from webhook.server.api_routes import api_router
    from webhook.server.app import create_app

    logging.disable(logging.WARNING)
    config = load_config(CONFIG)
    runtime = build_runtime(config, None, store=_store(config, nodes), load_policies=False)
    app = create_app(runtime, ui=False, extra_routers=[api_router(runtime)])
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(2048)
    ports.put(sock.getsockname()[1])
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on"))
    server.run(sockets=[sock])


# -- client ----------------------------------------------------------------------------------------------


class Connection:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    @classmethod
    async def open(cls, port: int) -> Connection:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        return cls(reader, writer)

    async def get(self, path: str) -> bytes:
        self.writer.write(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
        head = await self.reader.readuntil(b"\r\n\r\n")
        status = head.split(b" ", 2)[1]
        if status != b"200":
            raise RuntimeError(f"{path}: HTTP {status.decode()}")
        length = 0
        for line in head.split(b"\r\n"):
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":", 1)[1])
        return await self.reader.readexactly(length)

    def close(self) -> None:
        self.writer.close()


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def _load(port: int, path: str, clients: int, seconds: float) -> dict[str, Any]:
    connections = [await Connection.open(port) for _ in range(clients)]
    for connection in connections:  # warm: every connection once
        await connection.get(path)
    latencies: list[float] = []
    bodies: set[bytes] = set()
    stop = time.perf_counter() + seconds

    async def client(connection: Connection) -> None:
        while time.perf_counter() < stop:
            started = time.perf_counter()
            body = await connection.get(path)
            latencies.append(time.perf_counter() - started)
            if len(bodies) < 4:
                bodies.add(body)

    started = time.perf_counter()
    await asyncio.gather(*(client(c) for c in connections))
    elapsed = time.perf_counter() - started
    for connection in connections:
        connection.close()
    return {
        "clients": clients,
        "requests": len(latencies),
        "req_per_s": len(latencies) / elapsed,
        "p50_ms": statistics.median(latencies) * 1000,
        "p99_ms": _percentile(latencies, 0.99) * 1000,
        "max_ms": max(latencies) * 1000,
        "distinct_bodies": len(bodies),
        "body_bytes": len(next(iter(bodies))),
    }


def _precompute_ms(nodes: int, runs: int = 3) -> dict[str, Any]:
    from webhook.inventory.capacity import Inventory
    from webhook.inventory.profiles import hardware_profiles_view

    config = load_config(CONFIG)
    store = _store(config, nodes)
    model = store.snapshot()
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        hardware_profiles_view(Inventory(model, config))
        times.append((time.perf_counter() - started) * 1000)
    return {"nodes": len(model.nodes), "pods": len(model.pods), "precompute_ms": min(times)}


def _median_run(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The median of each number over the rounds (distinct bodies: the most seen in any round)."""
    merged = {key: statistics.median(r[key] for r in runs) for key in ("req_per_s", "p50_ms", "p99_ms", "max_ms")}
    return {**runs[0], **merged, "rounds": len(runs), "requests": sum(r["requests"] for r in runs),
            "distinct_bodies": max(r["distinct_bodies"] for r in runs)}


def _one_size(nodes: int, clients: int, seconds: float, rounds: int) -> dict[str, Any]:
    context = multiprocessing.get_context("spawn")
    ports = context.Queue()
    server = context.Process(target=_serve, args=(nodes, ports), daemon=True)
    server.start()
    try:
        port = ports.get(timeout=300)
        _pin(1)

        async def measure() -> dict[str, Any]:
            # Ready, and the first (inline) inventory build done.
            for _ in range(600):
                try:
                    probe = await Connection.open(port)
                    await probe.get(PROFILES)
                    probe.close()
                    break
                except (OSError, asyncio.IncompleteReadError):
                    await asyncio.sleep(0.1)
            # Rounds alternate baseline and API, so a burst of other work on the machine hits both.
            runs: dict[str, dict[str, list[dict[str, Any]]]] = {}
            for _round in range(rounds):
                for name, path in (("baseline_healthz", BASELINE), ("hardware_profiles", PROFILES)):
                    for mode, count in (("single_client", 1), ("concurrent", clients)):
                        runs.setdefault(name, {}).setdefault(mode, []).append(await _load(port, path, count, seconds))
            return {name: {mode: _median_run(r) for mode, r in modes.items()} for name, modes in runs.items()}

        measured = asyncio.run(measure())
    finally:
        server.terminate()
        server.join(10)
    base, api = measured["baseline_healthz"], measured["hardware_profiles"]
    ratios = {
        f"{mode}_{metric}": api[mode][metric] / base[mode][metric]
        for mode in ("single_client", "concurrent")
        for metric in ("req_per_s", "p50_ms", "p99_ms")
    }
    return {**_precompute_ms(nodes), **measured, "profiles_vs_healthz": ratios}


def bench_inventory(
    sizes: tuple[int, ...] = SIZES, clients: int = CLIENTS, seconds: float = 2.0, rounds: int = 3
) -> dict[str, Any]:
    from machine import describe_machine

    results: dict[str, Any] = {
        "benchmark": "inventory",
        "setup": (
            f"uvicorn (1 process, plain HTTP, 127.0.0.1) serving create_app + api_router over "
            f"generate_cluster(N); raw asyncio keep-alive clients: 1 and {clients} connections, {seconds:g}s each, "
            f"{rounds} rounds alternating with the baseline /healthz on the same server (medians); server and "
            "client pinned to different CPUs where there are two or more"
        ),
        "machine": describe_machine(),
        "sizes": {},
    }
    for nodes in sizes:
        results["sizes"][str(nodes)] = _one_size(nodes, clients, seconds, rounds)
    return results


def _print_ratios(results: dict[str, Any]) -> None:
    for nodes, result in results["sizes"].items():
        ratios = result["profiles_vs_healthz"]
        api = result["hardware_profiles"]["concurrent"]
        print(
            f"{nodes:>6} nodes: precompute {result['precompute_ms']:.0f} ms once per change; "
            f"{CLIENTS} clients: {api['req_per_s']:.0f} req/s, p99 {api['p99_ms']:.1f} ms; "
            f"vs /healthz: req/s x{ratios['concurrent_req_per_s']:.2f}, p50 x{ratios['concurrent_p50_ms']:.2f}, "
            f"single-client p50 x{ratios['single_client_p50_ms']:.2f}; "
            f"distinct bodies {api['distinct_bodies']}",
            file=sys.stderr,
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--sizes", default=",".join(str(s) for s in SIZES), help="node counts, comma-separated")
    parser.add_argument("--clients", type=int, default=CLIENTS, help="concurrent clients (default 100)")
    parser.add_argument("--seconds", type=float, default=2.0, help="seconds per measurement (default 2)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds per endpoint and client count (default 3)")
    parser.add_argument("--out", type=Path, help="also write the JSON here")
    args = parser.parse_args(argv)
    sizes = tuple(int(s) for s in args.sizes.split(",") if s)
    results = bench_inventory(sizes, args.clients, args.seconds, args.rounds)
    text = json.dumps(results, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n", encoding="utf-8")
    _print_ratios(results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
