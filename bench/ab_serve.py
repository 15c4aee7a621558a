"""A paired A/B of `kgwe serve --workers 1` between two source trees, per server core: does a change to the
HTTP shell (or anything on the request path) make a request cheaper?

Both servers run at once, each from its own tree, pinned to the same CPU; wrk, pinned to the others, drives
one then the other, alternating which goes first, over every example pod. A round's ratio is the tree's
requests per server CPU second over the base's; the answer is the median of the rounds' ratios (one run's
numbers move by several percent on a shared machine, a pair's ratio much less).

    git archive BASE_COMMIT | tar -x -C /tmp/base
    python bench/ab_serve.py /tmp/base . [--endpoint validate|mutate] [--rounds 8] [--seconds 3]

Prints JSON. Needs wrk.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_wrk  # siblings of this script
import soak
from bench_percore import _cpu_split, _CpuClock


@contextlib.contextmanager
def _serve(root: Path, cpus: set[int], certs: Any) -> Iterator[soak.Server]:
    """`kgwe serve --workers 1` run from `root` (its modules first on the path), as soak.kgwe_serve runs it."""
    port = soak._free_port()
    with tempfile.TemporaryDirectory(prefix="kgwe-ab-") as tmp:
        log_file = Path(tmp) / "server.log"
        command = [
            sys.executable, "-m", "webhook.cli", "--log-level", "warning", "serve", "--cluster", str(soak.CLUSTER),
            "--config", str(soak.CONFIG), "--host", "127.0.0.1", "--port", str(port), "--tls-cert-file",
            str(certs.tls_cert), "--tls-private-key-file", str(certs.tls_key), "--no-ui", "--workers", "1",
        ]
        environment = {**os.environ, "PYTHONPATH": str(root.resolve())}
        with log_file.open("wb") as log:
            process = subprocess.Popen(command, cwd=root, stdout=log, stderr=subprocess.STDOUT, env=environment,
                                       preexec_fn=soak.pinned_to(cpus))
        server = soak.Server(process, port, certs.ca_cert, log_file)
        try:
            soak._wait_ready(server)
            yield server
        finally:
            process.terminate()
            process.wait(10)


def ab_serve(base: Path, tree: Path, endpoint: str, rounds: int, seconds: float) -> dict[str, Any]:
    from certs.authority import Settings
    from certs.files import ensure_files

    server_cpus, client_cpus = _cpu_split()
    bodies = [b for b in soak.request_bodies() if b[0].startswith(f"/{endpoint}")]
    per_core: dict[str, list[float]] = {"base": [], "tree": []}
    ratios = []
    with tempfile.TemporaryDirectory(prefix="kgwe-ab-") as tmp:
        certs, _ = ensure_files(Path(tmp), Settings())
        with _serve(base, server_cpus, certs) as base_server, _serve(tree, server_cpus, certs) as tree_server:
            servers = {"base": base_server, "tree": tree_server}
            for index in range(rounds):
                order = ("base", "tree") if index % 2 == 0 else ("tree", "base")
                measured = {}
                for name in order:
                    server = servers[name]
                    clock = _CpuClock(server.process.pid)
                    result = bench_wrk.drive(server.port, bodies, seconds, warmup=1.0, threads=1,
                                             cpus=client_cpus, after_warmup=clock.start)
                    cpu = clock.stop()
                    if result["errors"]:
                        raise RuntimeError(f"{name}: {result['errors']} errors")
                    if cpu and result["requests"]:  # a round the machine starved entirely says nothing
                        measured[name] = result["requests"] / cpu
                        per_core[name].append(measured[name])
                if len(measured) == 2:
                    ratios.append(measured["tree"] / measured["base"])
    return {
        "name": "ab_serve",
        "endpoint": endpoint,
        "base": str(base),
        "tree": str(tree),
        "rounds": rounds,
        "base_req_per_server_core": statistics.median(per_core["base"]),
        "tree_req_per_server_core": statistics.median(per_core["tree"]),
        "ratio_median": statistics.median(ratios),
        "ratios": [round(r, 4) for r in ratios],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("base", type=Path)
    parser.add_argument("tree", type=Path, nargs="?", default=Path("."))
    parser.add_argument("--endpoint", choices=["validate", "mutate"], default="validate")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=3.0)
    args = parser.parse_args()
    print(json.dumps(ab_serve(args.base, args.tree, args.endpoint, args.rounds, args.seconds), indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
