"""Issue 36's scale goals: `kgwe serve` in cluster mode (list + watch of the fake API server, one worker) over
the generated GPU fleet of bench/scale_fleet.py, each figure against the same measured at 10 nodes in the
same run.

Per size: start-up from an empty cache to /readyz (and where it goes: the process's imports, the fake
server's LIST, KGWE's side after the last page); the worker's VmRSS and VmHWM; /mutate and /validate
latency; create -> stored through a minimal admission chain (the API server's part: /mutate and /validate
over HTTPS with real AdmissionReviews, the patch applied, the pod stored) against storing it without
KGWE; a node change reaching a decision (an H100 node appears: a pod asking H100s, refused while there
is none, is admitted) and a pod change reaching one (a running pod of the full `team-q` quota is deleted:
the quota controller releases the gated pod waiting behind it), with the quota pass's own duration
(`kgwe_quota_pass_seconds`); the read API and the UI's first page (/ui/ and /api/v1/nodes it loads), and
/api/v1/nodes read once right after ready (it waits for the inventory's first build, if that is not done).

    python bench/bench_scale.py [--nodes 1000] [--baseline 10]      # prints JSON

The worker's VmRSS is sampled every 100 ms from spawn to the end with the phases marked (`memory_trace`: when the
peak came and in which phase; scale_memory.py).

KGWE_SCALE_PROFILE=DIR: py-spy over the worker while the read at ready waits and admission runs (scale_profile.py).
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.client import HTTPSConnection, RemoteDisconnected
from pathlib import Path
from typing import Any

_ROOT = Path(__file__).resolve().parents[1]
for _path in (_ROOT, _ROOT / "bench", _ROOT / "tests" / "cluster"):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

import jsonpatch  # noqa: E402
import orjson  # noqa: E402
from kube_fake_apiserver import FakeApiServer, write_kubeconfig  # noqa: E402
from scale_fleet import QUOTA_NAMESPACE, generate_fleet, gpu_node, pod  # noqa: E402
from scale_memory import tracing  # noqa: E402
from scale_profile import dumps_while, profile_directory, recording  # noqa: E402

from webhook.review import create_review  # noqa: E402

CONFIG = _ROOT / "examples" / "config.yaml"
TOKEN = "bench-reader"
READY_TIMEOUT = 600.0
READ_PATHS = ("/ui/", "/api/v1/nodes", "/api/v1/hardware-profiles", "/api/v1/tenants", "/api/v1/costs?window=30d",
              "/api/v1/gangs", "/api/v1/workloads")
GATE = "kgwe.io/quota"


class _Recorder(FakeApiServer):
    """The fake API server, noting when a watched pod is first stored without the quota gate."""

    def __init__(self) -> None:
        super().__init__()
        self.watched: dict[str, float | None] = {}

    def put(self, kind: str, obj: dict[str, Any]) -> dict[str, Any]:
        stored = super().put(kind, obj)
        if kind == "Pod":
            name = stored["metadata"]["name"]
            gates = [g["name"] for g in stored["spec"].get("schedulingGates") or []]
            with self.cond:
                if name in self.watched and self.watched[name] is None and GATE not in gates:
                    self.watched[name] = time.perf_counter()
        return stored


def _percentiles(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {"n": len(ordered), "p50_ms": round(statistics.median(ordered), 2),
            "p99_ms": round(ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))], 2),
            "max_ms": round(ordered[-1], 2)}


def _status_kib(pid: int) -> dict[str, int]:
    wanted = {"VmRSS", "VmHWM"}
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in wanted:
            out[key] = int(value.split()[0])
    return out


class Client:
    """One keep-alive HTTPS connection to `kgwe serve`, as the API server holds one."""

    def __init__(self, port: int, ca_file: Path, timeout: float = 120.0) -> None:
        self.port, self.context, self.timeout = port, ssl.create_default_context(cafile=str(ca_file)), timeout
        self.connection = HTTPSConnection("127.0.0.1", port, context=self.context, timeout=timeout)

    def call(self, method: str, path: str, body: bytes | None = None, token: str | None = None
             ) -> tuple[int, bytes]:
        headers = {"Content-Type": "application/json"} if body is not None else {}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        for attempt in (1, 2):
            try:
                self.connection.request(method, path, body=body, headers=headers)
                response = self.connection.getresponse()
            except (OSError, ConnectionError, RemoteDisconnected) as exc:
                self.connection.close()
                self.connection = HTTPSConnection("127.0.0.1", self.port, context=self.context, timeout=self.timeout)
                # The server closed the kept-alive connection while it sat idle (its keep-alive timeout, during
                # the bench's long waits): sent again once on a new one, as the API server's client does.
                # Over TLS the close may read as an EOF in violation of the protocol.
                if attempt == 1 and isinstance(exc, RemoteDisconnected | BrokenPipeError | ConnectionResetError
                                               | ssl.SSLEOFError):
                    continue
                raise
            return response.status, response.read()
        raise AssertionError("unreachable")

    def review(self, endpoint: str, obj: dict[str, Any]) -> dict[str, Any]:
        status, data = self.call("POST", f"/{endpoint}?timeout=10s", orjson.dumps(create_review(obj, "bench", [])))
        if status != 200:
            raise RuntimeError(f"/{endpoint} answered {status}: {data[:300]!r}")
        answer: dict[str, Any] = orjson.loads(data)["response"]
        return answer


def admit(client: Client, obj: dict[str, Any]) -> tuple[dict[str, Any] | None, float, float]:
    """The API server's admission chain: /mutate, its patch applied, /validate. The object to store (None when
    refused) and the two calls' times in ms."""
    started = time.perf_counter()
    mutated = client.review("mutate", obj)
    middle = time.perf_counter()
    if not mutated.get("allowed"):
        return None, (middle - started) * 1000, 0.0
    if mutated.get("patch"):
        obj = jsonpatch.apply_patch(obj, orjson.loads(base64.b64decode(mutated["patch"])))
    validated = client.review("validate", obj)
    done = time.perf_counter()
    return (obj if validated.get("allowed") else None), (middle - started) * 1000, (done - middle) * 1000


@contextmanager
def kgwe_serve(kubeconfig: Path, directory: Path) -> Iterator[tuple[subprocess.Popen[bytes], int, Path]]:
    from soak import _free_port

    from certs.authority import Settings
    from certs.files import ensure_files

    paths, _ = ensure_files(directory / "certs", Settings())
    port = _free_port()
    env = {**os.environ, "PYTHONPATH": str(_ROOT), "KGWE_STATE_DIR": str(directory / "state"),
           "KGWE_TEST_KUBECONFIG": str(kubeconfig), "POD_NAMESPACE": "kgwe-system"}
    command = [sys.executable, "-m", "webhook.cli", "--log-level", "warning", "serve", "--config", str(CONFIG),
               "--host", "127.0.0.1", "--port", str(port), "--workers", "1",
               "--tls-cert-file", str(paths.tls_cert), "--tls-private-key-file", str(paths.tls_key)]
    with (directory / "serve.log").open("wb") as log:
        process = subprocess.Popen(command, cwd=_ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        yield process, port, paths.ca_cert
    finally:
        process.terminate()
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)


def _wait_ready(process: subprocess.Popen[bytes], port: int, ca_file: Path, log: Path) -> float:
    deadline = time.monotonic() + READY_TIMEOUT
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"kgwe serve exited {process.returncode}: {log.read_text()[-2000:]}")
        try:
            status, _ = Client(port, ca_file, timeout=5).call("GET", "/readyz")
            if status == 200:
                return time.monotonic()
        except OSError:
            pass
        time.sleep(0.05)
    raise RuntimeError(f"kgwe serve not ready after {READY_TIMEOUT:.0f} s: {log.read_text()[-2000:]}")


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _settle(pid: int, limit: float = 300.0) -> float:
    """Seconds after ready until the worker's CPU use stays under a fifth of a core for 3 s: what start-up
    left running (the controllers' first passes, caches filled) is done before latencies are measured."""
    started, quiet = time.monotonic(), 0
    while time.monotonic() - started < limit and quiet < 3:
        before = _cpu_seconds(pid)
        time.sleep(1.0)
        quiet = quiet + 1 if _cpu_seconds(pid) - before < 0.2 else 0
    return round(time.monotonic() - started, 1)


def _guarded(result: dict[str, Any], name: str, measure: Callable[[], Any]) -> None:
    """One figure; a failure (a timeout at a size the machine cannot hold) is recorded, the next still runs."""
    started = time.perf_counter()
    try:
        result[name] = measure()
    except Exception as exc:  # every failure is a result here
        result[name] = {"error": f"{type(exc).__name__}: {exc}"[:500]}
    print(f"[scale] {name}: {time.perf_counter() - started:.1f} s", file=sys.stderr, flush=True)


def _startup(server: FakeApiServer, spawned: float, ready: float) -> dict[str, Any]:
    with server.cond:
        requests = list(server.requests)
    pod_pages = [r.at for r in requests if r.path == "/api/v1/pods" and r.query.get("watch") != "true"]
    lists = [r.at for r in requests if r.query.get("watch") != "true" and r.method == "GET"]
    first = min(lists) if lists else ready
    return {"ready_s": round(ready - spawned, 2), "until_first_request_s": round(first - spawned, 2),
            "pod_list_pages": len(pod_pages),
            "pod_list_s": round(max(pod_pages) - min(pod_pages), 2) if pod_pages else None,
            "after_last_pod_page_s": round(ready - max(pod_pages), 2) if pod_pages else None}


def _admission(client: Client, server: FakeApiServer, runs: int) -> dict[str, Any]:
    """create -> stored with and without the admission chain; `runs` GPU pods of a namespace without quota."""
    chain, plain, mutate, validate = [], [], [], []
    for i in range(runs + 20):
        obj = pod(f"bench-{i:05d}", "team-001", None, 1, created=time.strftime("%Y-%m-%dT%H:%M:%SZ"))
        obj["metadata"]["uid"] = f"uid-bench-{i}"
        started = time.perf_counter()
        admitted, mutate_ms, validate_ms = admit(client, obj)
        if admitted is None:
            raise RuntimeError(f"the bench pod was refused: {client.review('mutate', obj)}")
        server.put("Pod", admitted)
        done = time.perf_counter()
        plain_pod = {**obj, "metadata": {**obj["metadata"], "name": f"plain-{i:05d}", "uid": f"uid-plain-{i}"}}
        put_started = time.perf_counter()
        server.put("Pod", plain_pod)
        put_done = time.perf_counter()
        if i >= 20:  # the first ones warm the connection and the caches
            chain.append((done - started) * 1000)
            plain.append((put_done - put_started) * 1000)
            mutate.append(mutate_ms)
            validate.append(validate_ms)
    return {"create_through_kgwe": _percentiles(chain), "create_without_kgwe": _percentiles(plain),
            "mutate": _percentiles(mutate), "validate": _percentiles(validate)}


def _node_change(client: Client, server: FakeApiServer, timeout: float = 30.0) -> dict[str, Any]:
    """A new H100 node: how long until a pod asking an H100 is admitted (refused while there is none)."""
    asking = pod("wants-h100", "team-002", None, 1)
    asking["metadata"]["annotations"]["kgwe.io/accelerator"] = "nvidia-h100-80gb"
    before, _, _ = admit(client, asking)
    node = gpu_node("h100-new-0", 0)
    labels = node["metadata"]["labels"]
    for key in ("nvidia.com/gpu.clique", "kgwe.io/nvlink-clique", "kubernetes.io/arch"):
        labels.pop(key)
    labels.update({"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.memory": "81559",
                   "nvidia.com/gpu.family": "hopper", "kgwe.io/accelerator-type": "nvidia-h100-80gb",
                   "kgwe.io/nvlink-domain-size": "8"})
    changed = time.perf_counter()
    server.put("Node", node)
    while time.perf_counter() - changed < timeout:
        after, _, _ = admit(client, asking)
        if after is not None:
            return {"refused_before": before is None, "reflected_ms": round((time.perf_counter() - changed) * 1000, 1)}
        time.sleep(0.01)
    return {"refused_before": before is None, "reflected_ms": None}


def _pod_change(client: Client, server: _Recorder, timeout: float = 60.0) -> dict[str, Any]:
    """team-q's quota is full: a new gated pod waits; one running pod of team-q is deleted and the quota
    controller releases the waiting one. Time from the delete to the pod stored ungated."""
    obj = pod("q-waiting", QUOTA_NAMESPACE, None, 8, created=time.strftime("%Y-%m-%dT%H:%M:%SZ"))
    admitted, _, _ = admit(client, obj)
    if admitted is None or GATE not in [g["name"] for g in admitted["spec"].get("schedulingGates") or []]:
        return {"error": "the team-q pod was not gated by /mutate"}
    with server.cond:
        server.watched["q-waiting"] = None
    server.put("Pod", admitted)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:  # the controller tells it why it waits: it has seen the pod
        stored = server.get("Pod", f"{QUOTA_NAMESPACE}/q-waiting") or {}
        if any(c.get("type", "").startswith("kgwe.io/") for c in (stored.get("status") or {}).get("conditions") or []):
            break
        time.sleep(0.02)
    waited_ungated = server.watched["q-waiting"] is not None
    changed = time.perf_counter()
    server.delete("Pod", f"{QUOTA_NAMESPACE}/q-run-0")
    while time.monotonic() < deadline and server.watched["q-waiting"] is None:
        time.sleep(0.005)
    released = server.watched["q-waiting"]
    return {"released_before_the_change": waited_ungated,
            "reflected_ms": None if released is None else round((released - changed) * 1000, 1)}


def _metric(client: Client, name: str) -> float | None:
    status, data = client.call("GET", "/metrics", token=TOKEN)
    for line in data.decode(errors="replace").splitlines() if status == 200 else []:
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    return None


def _reads(client: Client, repeat_under_s: float = 10.0, before: Callable[[str], None] = lambda _path: None
           ) -> dict[str, Any]:
    """Each read path three times (once when the first answer took over `repeat_under_s`); a path that times
    out is recorded as such and the next one is still read. `before` is told each path before it is read."""
    out: dict[str, Any] = {}
    for path in READ_PATHS:
        before(path)
        times: list[float] = []
        size, status = 0, 0
        try:
            while len(times) < 3 and (not times or times[0] < repeat_under_s * 1000):
                started = time.perf_counter()
                status, data = client.call("GET", path, token=TOKEN)
                times.append((time.perf_counter() - started) * 1000)
                size = len(data)
        except OSError as exc:
            out[path] = {"error": f"{type(exc).__name__} after {client.timeout:.0f} s", "first_ms": None}
            continue
        out[path] = {"status": status, "first_ms": round(times[0], 1), "median_ms": round(statistics.median(times), 1),
                     "bytes": size}
    first = [out[p].get("first_ms") for p in ("/ui/", "/api/v1/nodes")]
    out["ui_first_page_ms"] = None if None in first else round(sum(first), 1)  # type: ignore[arg-type]
    return out


def _read_at_ready(client: Client) -> dict[str, Any]:
    """/api/v1/nodes once, right after /readyz: the answer waits for the inventory's first build when that is
    not done yet (bounded: a 503 with Retry-After past the bound)."""
    started = time.perf_counter()
    try:
        status, data = client.call("GET", "/api/v1/nodes", token=TOKEN)
    except OSError as exc:
        return {"error": f"{type(exc).__name__} after {client.timeout:.0f} s"}
    return {"status": status, "ms": round((time.perf_counter() - started) * 1000, 1), "bytes": len(data)}


def measure(gpu_nodes: int, runs: int = 200) -> dict[str, Any]:
    """Every figure at one size (see the module docstring)."""
    fleet = generate_fleet(gpu_nodes)
    server = _Recorder()
    server.start()
    try:
        loaded = time.perf_counter()
        for kind, objects in (("Node", fleet.nodes), ("Pod", fleet.pods), ("Namespace", fleet.namespaces),
                              ("TenantQuota", fleet.quotas)):
            server.load(kind, objects)
        load_s = time.perf_counter() - loaded
        server.add_user(TOKEN, "bench-admin")
        for verb, resource in (("list", "nodes"), ("list", "pods")):
            server.allow("bench-admin", verb, resource)
        server.allow("bench-admin", "get", url="/metrics")
        with tempfile.TemporaryDirectory(prefix="kgwe-scale-") as tmp:
            kubeconfig = write_kubeconfig(Path(tmp) / "kubeconfig", server.url)
            spawned = time.monotonic()
            with kgwe_serve(kubeconfig, Path(tmp)) as (process, port, ca_file), tracing(process.pid) as rss:
                ready = _wait_ready(process, port, ca_file, Path(tmp) / "serve.log")
                rss.mark("read at ready")
                memory_ready = _status_kib(process.pid)
                client = Client(port, ca_file, timeout=60.0)
                spied = profile_directory()
                with dumps_while(process.pid, spied / f"read-at-ready-{gpu_nodes}.txt" if spied else None):
                    at_ready = _read_at_ready(client)
                result: dict[str, Any] = {
                    "fleet": fleet.counts(), "load_into_fake_server_s": round(load_s, 2),
                    "startup": _startup(server, spawned, ready), "memory_at_ready_kib": memory_ready,
                    "nodes_read_at_ready": at_ready}
                print(f"[scale] {gpu_nodes} nodes: ready in {result['startup']['ready_s']} s", file=sys.stderr)
                rss.mark("settling")
                result["settled_after_ready_s"] = _settle(process.pid)
                rss.mark("admission")
                with recording(process.pid, spied / f"admission-{gpu_nodes}.raw" if spied else None):
                    _guarded(result, "admission", lambda: _admission(client, server, runs))
                rss.mark("node change")
                _guarded(result, "node_change", lambda: _node_change(client, server))
                rss.mark("pod change")
                _guarded(result, "pod_change", lambda: _pod_change(client, server))
                rss.mark("quota pass metric")
                _guarded(result, "quota_pass_s", lambda: _metric(client, "kgwe_quota_pass_seconds"))
                _guarded(result, "reads", lambda: _reads(client, before=lambda path: rss.mark(f"read {path}")))
                with server.cond:
                    result["patches_by_kgwe"] = sum(1 for r in server.requests if r.method == "PATCH")
                result["memory_at_end_kib"] = _status_kib(process.pid)
                rss.mark("end")
            # The worker's VmRSS every 100 ms (kept every second): when the peak happened and in which phase.
            result["memory_trace"] = rss.summary()
    finally:
        server.close()
    return result


def bench_scale(nodes: int = 10_000, baseline_nodes: int = 10, runs: int = 200) -> dict[str, Any]:
    """The baseline size first, then the large one, in one run."""
    return {"baseline_nodes": baseline_nodes, "nodes": nodes, "cpus": len(os.sched_getaffinity(0)),
            "sizes": {str(baseline_nodes): measure(baseline_nodes, runs), str(nodes): measure(nodes, runs)}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--baseline", type=int, default=10)
    parser.add_argument("--runs", type=int, default=200)
    args = parser.parse_args()
    print(json.dumps(bench_scale(args.nodes, args.baseline, args.runs), indent=2))


if __name__ == "__main__":
    main()
