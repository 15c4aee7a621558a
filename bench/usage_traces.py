"""Generated DCGM exporter traces, and a real Prometheus loaded with them (tests/usage, bench_rightsizing).

The traces are shaped like published production traces: most pods hold far more GPU memory than they use
(Alibaba's PAI analysis: use below the planned request for 98 % of tasks), inference pods are mostly idle
(its GenAI serving trace: most pods under 10 % busy while holding 20-50 GB), training keeps its GPUs busy.
Series are `DCGM_FI_DEV_FB_USED` (MiB) and `DCGM_FI_PROF_GR_ENGINE_ACTIVE` (0..1; `DCGM_FI_DEV_GPU_UTIL` %
for pods marked `util_only`), one per GPU, with the exporter's labels. Deterministic for a seed.

`prometheus_with(openmetrics)` loads the text with `promtool tsdb create-blocks-from openmetrics` and
starts Debian's `prometheus` on a free loopback port (installing it with apt-get when missing and root).
"""

from __future__ import annotations

import math
import random
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import system_packages

MODELS = {
    "nvidia-h100-80gb": "NVIDIA H100 80GB HBM3",
    "nvidia-a100-80gb": "NVIDIA A100-SXM4-80GB",
    "nvidia-l4-24gb": "NVIDIA L4",
}
APT_TIMEOUT_SECONDS = 600


class PrometheusMissing(RuntimeError):
    """Debian's prometheus is not installed and cannot be."""


@dataclass
class TracePod:
    name: str
    start: float
    end: float
    uuids: list[str]


@dataclass
class TraceWorkload:
    namespace: str
    kind: str
    name: str
    type_id: str
    gpus: int  # per pod
    profile: str  # usual memory use: steady | spiky | idle | busy
    base_mib: float
    activity: float
    util_only: bool = False
    pods: list[TracePod] = field(default_factory=list)
    peak_mib: float = 0.0  # the highest sample of one GPU, filled while writing
    peak_total_mib: float = 0.0  # the highest sum over one pod's GPUs at one sample

    @property
    def key(self) -> str:
        return f"{self.kind}/{self.namespace}/{self.name}"


_SAFE = "bcdfghjklmnpqrstvwxz2456789"
_LETTERS = "abcdefghijklmnopqrstuvwxyz"


def _suffix(rng: random.Random, length: int) -> str:
    return "".join(rng.choice(_SAFE) for _ in range(length))


def _pod_names(rng: random.Random, kind: str, name: str, count: int) -> list[str]:
    if kind == "Deployment":
        template = _suffix(rng, 10)
        return [f"{name}-{template}-{_suffix(rng, 5)}" for _ in range(count)]
    if kind == "StatefulSet":
        return [f"{name}-{i}" for i in range(count)]
    if kind == "PyTorchJob":
        return [f"{name}-master-0", *(f"{name}-worker-{i}" for i in range(count - 1))]
    if kind == "Job":
        return [f"{name}-{_suffix(rng, 5)}" for _ in range(count)]
    return [name]


def generate(
    seed: int, end: float, hours: float, workloads: int = 24, short_share: float = 0.15
) -> list[TraceWorkload]:
    """Workloads whose pods run over `hours` up to `end` (unix seconds); `short_share` of them started
    recently (less history than a day)."""
    rng = random.Random(seed)
    kinds = [
        # (kind, type, gpus, profile, base MiB, activity, replicas)
        ("Deployment", "nvidia-h100-80gb", 1, "idle", 9000, 0.02, 3),  # inference, mostly idle
        ("Deployment", "nvidia-h100-80gb", 1, "spiky", 14000, 0.08, 2),  # inference with bursts
        ("Deployment", "nvidia-a100-80gb", 1, "steady", 30000, 0.12, 2),
        ("StatefulSet", "nvidia-h100-80gb", 1, "idle", 3500, 0.01, 1),  # notebooks
        ("PyTorchJob", "nvidia-h100-80gb", 4, "busy", 52000, 0.85, 2),  # training: keeps its GPUs
        ("Job", "nvidia-a100-80gb", 4, "steady", 15000, 0.25, 1),  # over-asked GPUs
        ("Pod", "nvidia-l4-24gb", 1, "steady", 4000, 0.2, 1),
    ]
    out: list[TraceWorkload] = []
    for index in range(workloads):
        kind, type_id, gpus, profile, base, activity, replicas = kinds[index % len(kinds)]
        # Letters, not digits: a trailing number would read as a StatefulSet ordinal or a Job index.
        name = f"{profile}-{kind.lower()}-{_LETTERS[index % 26]}{_LETTERS[index // 26 % 26]}"
        namespace = f"team-{'abc'[index % 3]}"
        short = index >= workloads - max(1, round(workloads * short_share))
        span = hours * 3600 if not short else min(hours, 6) * 3600
        base *= rng.uniform(0.7, 1.3)
        workload = TraceWorkload(namespace, kind, name, type_id, gpus, profile, base, activity,
                                 util_only=index % 5 == 4)
        for pod_name in _pod_names(rng, kind, name, replicas):
            uuids = [f"GPU-{rng.getrandbits(64):016x}" for _ in range(gpus)]
            workload.pods.append(TracePod(pod_name, end - span, end, uuids))
        out.append(workload)
    return out


def _memory(workload: TraceWorkload, rng: random.Random, moment: float, gpu: int) -> float:
    base = workload.base_mib * (1 - 0.1 * gpu / max(1, workload.gpus))
    if workload.profile == "spiky" and rng.random() < 0.004:
        return min(78000.0, base * rng.uniform(2.0, 2.6))
    wave = 1 + 0.15 * math.sin(moment / 5400)
    return base * wave * rng.uniform(0.95, 1.05)


def _activity(workload: TraceWorkload, rng: random.Random) -> float:
    if workload.profile == "idle":
        return rng.uniform(0.0, 0.03)
    if workload.profile == "spiky":
        return min(1.0, rng.expovariate(1 / workload.activity))
    return min(1.0, max(0.0, rng.gauss(workload.activity, 0.05)))


def openmetrics(workloads: list[TraceWorkload], seed: int, every: float = 60.0,
                hosts: dict[str, str] | None = None) -> str:
    """The OpenMetrics text of every pod's GPUs, one sample per `every` seconds (and fills the peaks).
    `hosts` renames the generated host labels (`node-h100-0`) to a cluster's node names, so that the
    node view can put the usage on its nodes."""
    rng = random.Random(seed + 1)
    memory_lines: list[str] = []
    busy_lines: list[str] = []
    util_lines: list[str] = []
    for workload in workloads:
        for pod_index, pod in enumerate(workload.pods):
            host = f"node-{workload.type_id.split('-')[1]}-{pod_index}"
            host = (hosts or {}).get(host, host)
            samples: list[list[tuple[float, float, float]]] = [[] for _ in pod.uuids]
            moment = math.ceil(pod.start / every) * every
            while moment <= pod.end:
                total = 0.0
                for gpu in range(len(pod.uuids)):
                    used = _memory(workload, rng, moment, gpu)
                    total += used
                    samples[gpu].append((moment, used, _activity(workload, rng)))
                    workload.peak_mib = max(workload.peak_mib, round(used))
                workload.peak_total_mib = max(workload.peak_total_mib, total)
                moment += every
            for gpu, uuid in enumerate(pod.uuids):
                labels = (f'gpu="{gpu}",UUID="{uuid}",device="nvidia{gpu}",modelName="{MODELS[workload.type_id]}",'
                          f'Hostname="{host}",container="main",namespace="{workload.namespace}",pod="{pod.name}"')
                for moment, used, busy in samples[gpu]:
                    memory_lines.append(f"DCGM_FI_DEV_FB_USED{{{labels}}} {round(used)} {moment:.0f}")
                    if workload.util_only:
                        util_lines.append(f"DCGM_FI_DEV_GPU_UTIL{{{labels}}} {round(busy * 100)} {moment:.0f}")
                    else:
                        busy_lines.append(f"DCGM_FI_PROF_GR_ENGINE_ACTIVE{{{labels}}} {busy:.4f} {moment:.0f}")
    parts = ["# TYPE DCGM_FI_DEV_FB_USED gauge", *memory_lines,
             "# TYPE DCGM_FI_PROF_GR_ENGINE_ACTIVE gauge", *busy_lines]
    if util_lines:
        parts += ["# TYPE DCGM_FI_DEV_GPU_UTIL gauge", *util_lines]
    return "\n".join([*parts, "# EOF", ""])


def ensure_prometheus() -> tuple[str, str]:
    """Paths of `prometheus` and `promtool`, installing Debian's package when missing and root."""
    try:
        system_packages.ensure(["prometheus"], APT_TIMEOUT_SECONDS)
    except system_packages.InstallFailed as exc:
        raise PrometheusMissing(str(exc)) from None
    found = shutil.which("prometheus"), shutil.which("promtool")
    assert found[0] and found[1]  # ensure() raised otherwise
    return found[0], found[1]


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def prometheus_with(text: str, workdir: Path | None = None, flags: tuple[str, ...] = ()) -> Iterator[str]:
    """A real Prometheus serving the OpenMetrics `text`; yields its base URL and stops it after. `flags` are
    added to its command line (e.g. `--query.lookback-delta=59s`)."""
    prometheus, promtool = ensure_prometheus()
    with tempfile.TemporaryDirectory(prefix="kgwe-prom-", dir=workdir) as tmp:
        root = Path(tmp)
        source, data = root / "trace.om", root / "data"
        source.write_text(text, encoding="utf-8")
        subprocess.run([promtool, "tsdb", "create-blocks-from", "openmetrics", str(source), str(data)],
                       check=True, capture_output=True, timeout=600)
        config = root / "prometheus.yml"
        config.write_text("global: {scrape_interval: 1h}\nscrape_configs: []\n", encoding="utf-8")
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        log = (root / "prometheus.log").open("wb")
        process = subprocess.Popen(
            [prometheus, f"--config.file={config}", f"--storage.tsdb.path={data}",
             f"--web.listen-address=127.0.0.1:{port}", "--storage.tsdb.retention.time=30d", *flags],
            stdout=log, stderr=subprocess.STDOUT,
        )
        try:
            _wait_ready(url, process, root / "prometheus.log")
            yield url
        finally:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
            log.close()


def _wait_ready(url: str, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"prometheus exited: {log.read_text(errors='replace')[-2000:]}")
        try:
            with urllib.request.urlopen(f"{url}/-/ready", timeout=2) as answer:
                if answer.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.2)
    raise RuntimeError("prometheus did not become ready in 60 s")
