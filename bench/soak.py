"""Sustained load: `kgwe serve` as a user runs it, driven over loopback TLS as fast as it answers.

The server is the real command (`python -m webhook.cli serve --cluster examples/cluster`) in its own
process, with a certificate made by certs/. The client keeps `connections` HTTP/1.1 keep-alive
connections busy (closed loop: the rate is the highest the machine sustains), alternating `/mutate`
and `/validate` over every example pod, each request with its own uid, and checks every answer: HTTP
200, the uid echoed, a decision present. Every second it records the answers and the server's
resident memory. Bounded by `seconds` and by `max_requests`, whichever comes first; 127.0.0.1 only.

Passes when there are no errors and the server's RSS grew less than 10 % from the first window to
the last (windows of 10 s, shorter for short runs, after a warm-up that is not counted).

Run: `.venv/bin/python bench/soak.py [SECONDS]` (prints JSON).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

_ROOT = Path(__file__).resolve().parents[1]
if str(_ROOT) not in sys.path:
    sys.path.insert(0, str(_ROOT))

import orjson  # noqa: E402
import yaml  # noqa: E402

PODS = _ROOT / "examples" / "pods"
CLUSTER = _ROOT / "examples" / "cluster"
CONFIG = _ROOT / "examples" / "config.yaml"
UID_PLACEHOLDER = "kgwe-soak-uid-placeholder-0000000000"  # 36 characters, like the API server's UUIDs
MEMORY_GROWTH_LIMIT = 0.10
WINDOW_SECONDS = 10.0
START_SECONDS = 90.0


@dataclass
class Second:
    """What happened in one second of the run."""

    answers: int = 0
    errors: int = 0
    latencies: list[float] = field(default_factory=list)
    rss_kib: int | None = None


@dataclass
class Tally:
    seconds: list[Second] = field(default_factory=list)
    error_samples: list[str] = field(default_factory=list)
    started: float = 0.0
    sent: int = 0

    def current(self) -> Second:
        index = int(time.perf_counter() - self.started)
        while len(self.seconds) <= index:
            self.seconds.append(Second())
        return self.seconds[index]

    def error(self, what: str) -> None:
        self.current().errors += 1
        if len(self.error_samples) < 10:
            self.error_samples.append(what)


def _load_pod(path: Path) -> dict[str, Any]:
    return next(d for d in yaml.safe_load_all(path.read_text()) if d and d.get("kind") == "Pod")


def request_bodies() -> list[tuple[str, bytes]]:
    """(path, AdmissionReview body with the uid placeholder): every example pod to /mutate, and the pod as
    the mutating webhook left it to /validate, as the API server sends them."""
    from webhook.assembly import build_runtime
    from webhook.config import load_config
    from webhook.review import create_review, review_pod

    runtime = build_runtime(load_config(CONFIG), CLUSTER)
    bodies = []
    for path in sorted(PODS.glob("*.yaml")):
        pod = _load_pod(path)
        mutated = review_pod(runtime.admission, pod, "soak", ["team-a"], 10).object
        for endpoint, obj in (("/mutate", pod), ("/validate", mutated)):
            review = create_review(obj, "soak", ["team-a"])
            review["request"]["uid"] = UID_PLACEHOLDER
            bodies.append((f"{endpoint}?timeout=10s", orjson.dumps(review)))
    return bodies


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _rss_kib(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


@dataclass
class Server:
    process: subprocess.Popen[bytes]
    port: int
    ca_file: Path
    log_file: Path

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


def pinned_to(cpus: set[int] | None) -> Callable[[], None] | None:
    """A `preexec_fn` that keeps the child (and whatever it forks) to `cpus`; None leaves it free."""
    if not cpus:
        return None
    return lambda: os.sched_setaffinity(0, cpus)


@contextlib.contextmanager
def kgwe_serve(cpus: set[int] | None = None, extra_args: tuple[str, ...] = (), workers: int | None = 1
               ) -> Iterator[Server]:
    """`kgwe serve` on 127.0.0.1 over the example cluster, with its own CA; stopped on exit. `cpus` pins it
    before it starts, so that every worker it forks keeps to them."""
    from certs.authority import Settings
    from certs.files import ensure_files

    with tempfile.TemporaryDirectory(prefix="kgwe-soak-") as tmp:
        paths, _ = ensure_files(Path(tmp) / "certs", Settings())
        port = _free_port()
        log_file = Path(tmp) / "server.log"
        command = [
            sys.executable, "-m", "webhook.cli", "--log-level", "warning", "serve",
            "--cluster", str(CLUSTER), "--config", str(CONFIG), "--host", "127.0.0.1", "--port", str(port),
            "--tls-cert-file", str(paths.tls_cert), "--tls-private-key-file", str(paths.tls_key), "--no-ui",
            # One process to pin and whose memory to watch; None leaves kgwe serve's default worker count.
            *(("--workers", str(workers)) if workers is not None else ()),
            *extra_args,
        ]
        with log_file.open("wb") as log:
            process = subprocess.Popen(command, cwd=_ROOT, stdout=log, stderr=subprocess.STDOUT,
                                       preexec_fn=pinned_to(cpus))
        server = Server(process, port, paths.ca_cert, log_file)
        try:
            _wait_ready(server)
            yield server
        finally:
            process.terminate()
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(10)


def _wait_ready(server: Server) -> None:
    context = ssl.create_default_context(cafile=str(server.ca_file))
    deadline = time.monotonic() + START_SECONDS
    while True:
        if server.process.poll() is not None:
            raise RuntimeError(f"kgwe serve exited with {server.process.returncode}:\n{server.log_tail()}")
        try:
            with urllib.request.urlopen(f"https://127.0.0.1:{server.port}/readyz", context=context, timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"kgwe serve not ready after {START_SECONDS:.0f}s:\n{server.log_tail()}")
        time.sleep(0.1)


def _frame(path: str, body: bytes) -> bytes:
    return (
        f"POST {path} HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\n\r\n"
    ).encode() + body


def _check(head: bytes, body: bytes, uid: str) -> str | None:
    """None when the answer is a well-formed AdmissionReview for `uid`, else what is wrong with it."""
    if not head.startswith(b"HTTP/1.1 200"):
        return head.split(b"\r\n", 1)[0].decode(errors="replace")
    try:
        response = orjson.loads(body).get("response") or {}
    except orjson.JSONDecodeError:
        return "response is not JSON"
    if response.get("uid") != uid:
        return f"uid {response.get('uid')!r} answered for {uid!r}"
    if not isinstance(response.get("allowed"), bool):
        return "no decision in the response"
    if response["allowed"] is False and not (response.get("status") or {}).get("message"):
        return "refusal without a message"
    return None


async def _connection(index: int, server: Server, context: ssl.SSLContext, bodies: list[tuple[str, bytes]],
                      tally: Tally, stop_at: float, max_requests: int) -> None:
    placeholder = UID_PLACEHOLDER.encode()
    position = index
    while time.perf_counter() < stop_at and tally.sent < max_requests:
        try:
            reader, writer = await asyncio.open_connection(
                "127.0.0.1", server.port, ssl=context, server_hostname="127.0.0.1"
            )
        except OSError as exc:
            tally.error(f"connect: {exc}")
            await asyncio.sleep(0.05)
            continue
        try:
            while time.perf_counter() < stop_at and tally.sent < max_requests:
                tally.sent += 1
                path, body = bodies[position % len(bodies)]
                position += 1
                uid = f"{tally.sent:036d}"
                started = time.perf_counter()
                writer.write(_frame(path, body.replace(placeholder, uid.encode())))
                head = await reader.readuntil(b"\r\n\r\n")
                lower = head.lower()
                start = lower.find(b"content-length:")
                length = int(lower[start + 15:].split(b"\r\n", 1)[0]) if start >= 0 else 0
                answer = await reader.readexactly(length)
                elapsed = time.perf_counter() - started
                problem = _check(head, answer, uid)
                second = tally.current()
                if problem is None:
                    second.answers += 1
                    second.latencies.append(elapsed)
                else:
                    tally.error(f"{path}: {problem}")
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError) as exc:
            tally.error(f"connection: {type(exc).__name__}: {exc}")
        finally:
            writer.close()


async def _sample_memory(pid: int, tally: Tally, stop_at: float) -> None:
    while time.perf_counter() < stop_at:
        second = tally.current()
        second.rss_kib = _rss_kib(pid)
        await asyncio.sleep(1.0 - (time.perf_counter() - tally.started) % 1.0)


async def _drive(server: Server, bodies: list[tuple[str, bytes]], connections: int, seconds: float,
                 max_requests: int) -> Tally:
    context = ssl.create_default_context(cafile=str(server.ca_file))
    tally = Tally(started=time.perf_counter())
    stop_at = tally.started + seconds
    await asyncio.gather(
        _sample_memory(server.process.pid, tally, stop_at),
        *(_connection(i, server, context, bodies, tally, stop_at, max_requests) for i in range(connections)),
    )
    return tally


def _run(coroutine: Any) -> Any:
    try:
        import uvloop

        return uvloop.run(coroutine)
    except ImportError:
        return asyncio.run(coroutine)


def _percentile(ordered: list[float], share: float) -> float:
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))] if ordered else float("nan")


def summarize(tally: Tally, warmup_seconds: int) -> dict[str, Any]:
    measured = tally.seconds[warmup_seconds:]
    # The last second is usually cut short by the stop; leave it out of rates and windows.
    if len(measured) > 1:
        measured = measured[:-1]
    latencies = sorted(x for s in measured for x in s.latencies)
    answers = sum(s.answers for s in measured)
    window = int(min(WINDOW_SECONDS, max(1, len(measured) // 3)))
    first = [s.rss_kib for s in measured[:window] if s.rss_kib]
    last = [s.rss_kib for s in measured[-window:] if s.rss_kib]
    first_rss = statistics.fmean(first) if first else None
    last_rss = statistics.fmean(last) if last else None
    growth = (last_rss - first_rss) / first_rss if first_rss and last_rss else None
    errors = sum(s.errors for s in tally.seconds)
    rates = [s.answers for s in measured]
    return {
        "measured_seconds": len(measured),
        "warmup_seconds": warmup_seconds,
        "requests": answers,
        "errors": errors,
        "error_samples": tally.error_samples,
        "req_per_s": answers / len(measured) if measured else 0.0,
        "req_per_s_slowest_second": min(rates) if rates else 0,
        "p50_ms": _percentile(latencies, 0.50) * 1000,
        "p99_ms": _percentile(latencies, 0.99) * 1000,
        "p999_ms": _percentile(latencies, 0.999) * 1000,
        "max_ms": latencies[-1] * 1000 if latencies else float("nan"),
        "rss_window_seconds": window,
        "rss_first_window_mib": round(first_rss / 1024, 1) if first_rss else None,
        "rss_last_window_mib": round(last_rss / 1024, 1) if last_rss else None,
        "rss_growth": round(growth, 4) if growth is not None else None,
        "rss_growth_limit": MEMORY_GROWTH_LIMIT,
        "ok": errors == 0 and answers > 0 and growth is not None and growth < MEMORY_GROWTH_LIMIT,
    }


def soak(seconds: float = 60.0, connections: int = 16, max_requests: int = 1_000_000, warmup_seconds: int = 3,
         pin: bool = True) -> dict[str, Any]:
    """Drive `kgwe serve` for `warmup_seconds + seconds` and summarize the measured part."""
    bodies = request_bodies()
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    pinned = pin and len(cpus) >= 2
    restore = set(cpus)
    with kgwe_serve(cpus={cpus[0]} if pinned else None) as server:
        if pinned:
            os.sched_setaffinity(0, {cpus[1]})
        try:
            tally = _run(_drive(server, bodies, connections, seconds + warmup_seconds, max_requests))
        finally:
            if pinned:
                os.sched_setaffinity(0, restore)
        alive = server.process.poll() is None
        log_tail = server.log_tail(10)
    result = summarize(tally, warmup_seconds)
    result.update({
        "name": "soak_kgwe_serve",
        "setup": f"kgwe serve --cluster examples/cluster over TLS on 127.0.0.1, {connections} keep-alive connections "
                 f"(closed loop), /mutate and /validate alternating over {len(bodies) // 2} example pods, "
                 f"unique uid per request" + (", server and client pinned to different CPUs" if pinned else ""),
        "connections": connections,
        "server_alive_at_end": alive,
    })
    result["ok"] = result["ok"] and alive
    if not result["ok"]:
        result["server_log_tail"] = log_tail
    return result


if __name__ == "__main__":
    duration = float(sys.argv[1]) if len(sys.argv) > 1 else 60.0
    print(json.dumps(soak(duration), indent=2))
