"""Where a request's time goes in the running server: py-spy samples `kgwe serve` while bench/soak.py's client
drives it, and the samples are summed per function (self time and time including callees).

    python bench/profile_server.py [--seconds 10] [--endpoint mutate|validate|both] [--top 25] [--out FILE] [--wrk]

`--wrk` profiles the server as bench/bench_percore.py measures it: one worker pinned to the first CPU, wrk
pinned to the others (the split of docs/performance.md, "Per core"). Needs py-spy (`pip install py-spy`)
and permission to read another process's memory (root, or ptrace_scope 0). `--out` keeps the raw collapsed
stacks (flamegraph.pl and speedscope read them).
"""

from __future__ import annotations

import argparse
import collections
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

_BENCH = Path(__file__).resolve().parent
if str(_BENCH) not in sys.path:
    sys.path.insert(0, str(_BENCH))

import bench_wrk  # noqa: E402
from bench_percore import _cpu_split  # noqa: E402
from soak import _drive, _run, kgwe_serve, request_bodies  # noqa: E402

_FRAME = re.compile(r"^(?P<function>.+?) \((?P<file>.+?)(?::\d+)?\)$")


def _label(frame: str) -> str:
    """`function (path/to/file.py:12)` as `function (file.py)`, shorter and merged across lines."""
    match = _FRAME.match(frame.strip())
    if match is None:
        return frame.strip()
    path = match.group("file")
    for marker in ("site-packages/", "/work/", "/lib/python3"):
        if marker in path:
            path = path.split(marker, 1)[1]
    return f"{match.group('function')} ({path})"


def summarize(collapsed: str, top: int) -> str:
    """The heaviest functions by self samples and by inclusive samples, from py-spy's raw format."""
    own: collections.Counter[str] = collections.Counter()
    inclusive: collections.Counter[str] = collections.Counter()
    total = 0
    for line in collapsed.splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = [_label(f) for f in stack.split(";") if f.strip()]
        if not frames:
            continue
        total += count
        own[frames[-1]] += count
        for frame in set(frames):
            inclusive[frame] += count
    lines = [f"{total} samples"]
    for title, counter in (("self", own), ("inclusive", inclusive)):
        lines.append(f"\n-- top {top} by {title} time --")
        for label, count in counter.most_common(top):
            lines.append(f"{100 * count / max(total, 1):5.1f}%  {label}")
    return "\n".join(lines)


def profile(seconds: float, endpoint: str, connections: int = 16, wrk: bool = False) -> str:
    py_spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not Path(py_spy).exists():
        raise SystemExit("py-spy is not installed: pip install py-spy")
    if wrk and bench_wrk.wrk_path() is None:
        raise SystemExit("wrk is not installed: apt-get install wrk")
    bodies = [b for b in request_bodies() if endpoint == "both" or b[0].startswith(f"/{endpoint}")]
    server_cpus, client_cpus = _cpu_split()
    with kgwe_serve(cpus=server_cpus if wrk else None) as server, tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp) / "stacks.txt"

        def load(length: float) -> None:
            if wrk:
                bench_wrk.drive(server.port, bodies, length, warmup=1.0, threads=1, connections=connections,
                                cpus=client_cpus)
            else:
                _run(_drive(server, bodies, connections, length, 10_000_000))

        load(1.0)  # warm-up, not sampled
        sampler = subprocess.Popen(
            [py_spy, "record", "--pid", str(server.process.pid), "--duration", str(int(seconds)), "--rate", "250",
             "--format", "raw", "--output", str(raw), "--nonblocking"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        )
        load(seconds + 1)
        _out, err = sampler.communicate(timeout=seconds + 30)
        if sampler.returncode != 0 or not raw.exists():
            raise SystemExit(f"py-spy failed: {err.decode(errors='replace')}")
        return raw.read_text()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--endpoint", choices=["mutate", "validate", "both"], default="both")
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--out", type=Path, help="also write the collapsed stacks here")
    parser.add_argument("--wrk", action="store_true", help="one worker on the first CPU, wrk on the others")
    args = parser.parse_args(argv)
    collapsed = profile(args.seconds, args.endpoint, wrk=args.wrk)
    if args.out:
        args.out.write_text(collapsed)
    print(summarize(collapsed, args.top))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
