"""The node agent against the real NVIDIA driver, where one is loaded: what `kgwe agent` reads through pynvml
and libnvidia-ml must agree with what `nvidia-smi` reports of the same GPUs, and per-process memory with
`nvidia-smi --query-compute-apps` (a child process holding memory and running a kernel through libcuda).

Skipped where no driver answers (CI, development machines): the fake library in tests/fixtures/nvml covers
the agent's logic there. Run on a GPU machine with `python -m pytest tests/agent/test_real_nvml.py`.
"""

from __future__ import annotations

import csv
import json
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pynvml
import pytest
from prometheus_client.parser import text_string_to_metric_families

from agent.document import build_document
from agent.nvlink import normalise_bus_id
from agent.nvml_discovery import scan
from agent.publisher import desired_labels
from agent.usage_nvml import UsageReader
from policies.vocabulary.accelerator_types import UNKNOWN, default_table
from policies.vocabulary.topology_schema import LABEL_ACCELERATOR_TYPE

ROOT = Path(__file__).resolve().parents[2]
SMI_FIELDS = ("index", "uuid", "name", "memory.total", "pci.bus_id", "compute_mode", "mig.mode.current")


@pytest.fixture(scope="module")
def smi_rows() -> list[dict[str, str]]:
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        pytest.skip(f"no NVIDIA driver answers here: {exc}")
    pynvml.nvmlShutdown()
    smi = shutil.which("nvidia-smi")
    if smi is None:
        pytest.skip("a driver answers but nvidia-smi is not on PATH to compare with")
    out = subprocess.run(
        [smi, f"--query-gpu={','.join(SMI_FIELDS)}", "--format=csv,noheader,nounits"],
        capture_output=True, text=True, check=True, timeout=60,
    ).stdout
    return [dict(zip(SMI_FIELDS, (cell.strip() for cell in row), strict=True))
            for row in csv.reader(out.strip().splitlines())]


def test_every_gpu_is_read_as_nvidia_smi_reports_it(smi_rows: list[dict[str, str]]) -> None:
    doc = build_document(scan(), node_name="real-nvml", now=datetime.now(UTC))
    assert len(doc.gpus) == len(smi_rows)
    table = default_table()
    for gpu, row in zip(sorted(doc.gpus, key=lambda g: g.index), smi_rows, strict=True):
        assert gpu.index == int(row["index"])
        assert gpu.uuid == row["uuid"]
        assert gpu.name == row["name"]
        assert gpu.memory_mib == int(row["memory.total"])
        assert gpu.pci_bus_id is not None
        assert normalise_bus_id(gpu.pci_bus_id) == normalise_bus_id(row["pci.bus_id"])
        assert gpu.healthy, gpu.error
        assert gpu.mig_enabled == (row["mig.mode.current"] == "Enabled")
        # A GPU model the table knows is typed by its NVML name, never by the memory fallback.
        assert gpu.accelerator_type != UNKNOWN
        if table.get(gpu.accelerator_type) is None:
            pytest.fail(f"{gpu.name} ({gpu.memory_mib} MiB) is typed {gpu.accelerator_type}, not a type of the "
                        "table: add its NVML name as an alias")
    assert doc.accelerator_type == doc.gpus[0].accelerator_type or doc.accelerator_type == "mixed"
    assert desired_labels(doc)[LABEL_ACCELERATOR_TYPE] == doc.accelerator_type


def test_the_agent_command_prints_the_document_of_the_real_gpus(smi_rows: list[dict[str, str]]) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "agent.main", "--dry-run", "--node-name", "real-nvml"],
        capture_output=True, text=True, check=True, timeout=120, cwd=ROOT,
    ).stdout
    doc = json.loads(out)
    assert [g["uuid"] for g in doc["gpus"]] == [row["uuid"] for row in smi_rows]
    assert doc["driverVersion"]
    assert doc["nvlink"]["domainSize"] <= len(smi_rows)


# ---- usage: per-process memory and utilisation against nvidia-smi ----------------------------------------

# A child that makes a CUDA context on GPU 0 through the driver API (libcuda.so.1 ships with the driver, no
# toolkit needed), holds 256 MiB, says "ready", then keeps the GPU busy with a one-thread spin kernel (PTX,
# JIT-compiled by the driver) until it is killed. It prints "skip: ..." when any of that is not possible.
_CUDA_CHILD = r'''
import ctypes, sys, time
PTX = b"""
.version 6.0
.target sm_50
.address_size 64
.visible .entry spin(.param .u64 out, .param .u64 n)
{
  .reg .u64 %rd<5>;
  .reg .pred %p;
  ld.param.u64 %rd1, [out];
  ld.param.u64 %rd2, [n];
  mov.u64 %rd3, 0;
LOOP:
  add.u64 %rd3, %rd3, 1;
  setp.lt.u64 %p, %rd3, %rd2;
  @%p bra LOOP;
  st.global.u64 [%rd1], %rd3;
  ret;
}
"""
def check(what, code):
    if code != 0:
        print(f"skip: {what} returned CUDA error {code}", flush=True)
        sys.exit(0)
try:
    cuda = ctypes.CDLL("libcuda.so.1")
except OSError as err:
    print(f"skip: {err}", flush=True)
    sys.exit(0)
check("cuInit", cuda.cuInit(0))
device = ctypes.c_int()
check("cuDeviceGet", cuda.cuDeviceGet(ctypes.byref(device), 0))
context = ctypes.c_void_p()
check("cuCtxCreate", cuda.cuCtxCreate_v2(ctypes.byref(context), 0, device))
buffer = ctypes.c_uint64()
check("cuMemAlloc", cuda.cuMemAlloc_v2(ctypes.byref(buffer), ctypes.c_size_t(256 << 20)))
module = ctypes.c_void_p()
check("cuModuleLoadData", cuda.cuModuleLoadData(ctypes.byref(module), ctypes.c_char_p(PTX)))
function = ctypes.c_void_p()
check("cuModuleGetFunction", cuda.cuModuleGetFunction(ctypes.byref(function), module, b"spin"))
print("ready", flush=True)
out, n = ctypes.c_uint64(buffer.value), ctypes.c_uint64(20_000_000)
params = (ctypes.c_void_p * 2)(ctypes.cast(ctypes.byref(out), ctypes.c_void_p),
                               ctypes.cast(ctypes.byref(n), ctypes.c_void_p))
deadline = time.monotonic() + 120
while time.monotonic() < deadline:
    check("cuLaunchKernel", cuda.cuLaunchKernel(function, 1, 1, 1, 1, 1, 1, 0, None, params, None))
    check("cuCtxSynchronize", cuda.cuCtxSynchronize())
'''


@pytest.fixture
def busy_cuda_process(smi_rows: list[dict[str, str]]) -> Iterator[subprocess.Popen[str] | None]:
    """A process holding 256 MiB and keeping GPU 0 busy, or None where CUDA cannot run one (a MIG GPU 0)."""
    child = subprocess.Popen([sys.executable, "-c", _CUDA_CHILD], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None
        line = child.stdout.readline().strip()
        yield child if line == "ready" else None
    finally:
        child.kill()
        child.wait(timeout=30)


def _smi_apps() -> dict[tuple[str, int], int | None]:
    out = subprocess.run(
        ["nvidia-smi", "--query-compute-apps=gpu_uuid,pid,used_memory", "--format=csv,noheader,nounits"],
        capture_output=True, text=True, check=True, timeout=60,
    ).stdout
    apps: dict[tuple[str, int], int | None] = {}
    for row in csv.reader(out.strip().splitlines()):
        if len(row) != 3:
            continue
        uuid, pid, memory = (cell.strip() for cell in row)
        apps[(uuid, int(pid))] = int(memory) if memory.isdigit() else None
    return apps


def _agent_apps(reader: UsageReader) -> dict[tuple[str, int], int | None]:
    apps: dict[tuple[str, int], int | None] = {}
    for device in reader.read().devices:
        for process in device.processes:
            memory = None if process.memory_bytes is None else process.memory_bytes // (1024 * 1024)
            apps[(device.gpu_uuid, process.pid)] = memory
    return apps


def test_per_process_memory_is_what_nvidia_smi_reports(busy_cuda_process: subprocess.Popen[str] | None) -> None:
    reader = UsageReader()
    reader.open()
    try:
        before = _agent_apps(reader)
        smi = _smi_apps()
        after = _agent_apps(reader)
    finally:
        reader.close()
    # Processes may start or end between the reads: compare those both of the agent's reads saw.
    steady = {key: memory for key, memory in before.items() if after.get(key, -1) == memory}
    for key, memory in steady.items():
        assert key in smi, f"the agent sees process {key} that nvidia-smi does not list"
        listed = smi[key]
        if memory is not None and listed is not None:
            assert abs(memory - listed) <= 1, f"process {key}: agent {memory} MiB, nvidia-smi {listed} MiB"
    for key in smi:
        assert key in before or key in after, f"nvidia-smi lists process {key} that the agent missed"
    if busy_cuda_process is not None:
        assert any(memory is not None and memory >= 256 for memory in steady.values()), steady


def test_process_utilisation_samples_are_unix_microseconds(busy_cuda_process: subprocess.Popen[str] | None) -> None:
    """The reader's window compares NVML's sample timestamps with the wall clock: they must be unix µs."""
    if busy_cuda_process is None:
        pytest.skip("no CUDA process could be started on GPU 0")
    time.sleep(3)  # a few of NVML's sample periods with the kernel running
    pynvml.nvmlInit()
    try:
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        try:
            samples = pynvml.nvmlDeviceGetProcessUtilization(handle, 0)
        except pynvml.NVMLError as err:
            if err.value in (pynvml.NVML_ERROR_NOT_SUPPORTED, pynvml.NVML_ERROR_NOT_FOUND):
                pytest.skip(f"no per-process utilisation on GPU 0: {err}")
            raise
    finally:
        pynvml.nvmlShutdown()
    assert samples, "a busy process and no sample"
    for sample in samples:
        assert abs(sample.timeStamp / 1_000_000 - time.time()) < 120, sample
    assert max(sample.smUtil for sample in samples) > 0
    reader = UsageReader()
    reader.open()
    try:
        busy = [p for d in reader.read().devices if d.gpu_index == 0 for p in d.processes if p.sm_percent]
    finally:
        reader.close()
    assert busy, "the reader counted no process of GPU 0 as busy"


def test_print_metrics_reports_every_gpu(smi_rows: list[dict[str, str]]) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "agent.main", "--print-metrics", "--node-name", "real-nvml",
         "--pod-resources-socket", ""],
        capture_output=True, text=True, check=True, timeout=120, cwd=ROOT,
    ).stdout
    families = {f.name: f for f in text_string_to_metric_families(out)}
    memory = families["DCGM_FI_DEV_FB_USED"].samples
    whole = {row["uuid"] for row in smi_rows if row["mig.mode.current"] != "Enabled"}
    assert whole <= {s.labels["UUID"] for s in memory}
    assert all(s.labels["Hostname"] == "real-nvml" and s.value >= 0 for s in memory)
    for sample in families["DCGM_FI_DEV_GPU_UTIL"].samples:
        assert 0 <= sample.value <= 100 and "GPU_I_ID" not in sample.labels
    for sample in families.get("DCGM_FI_PROF_GR_ENGINE_ACTIVE", families["DCGM_FI_DEV_GPU_UTIL"]).samples:
        assert sample.value >= 0
