"""What the node's GPUs do now, from NVML: per GPU (or, on a MIG GPU, per MIG device) its memory in use, its
busy percent, and its processes with their memory and SM utilisation. Plain data; no Kubernetes here.

The devices are those NVIDIA's DCGM exporter reports by default: every MIG device of a GPU in MIG mode,
else the whole GPU. Per device, per read:
- `nvmlDeviceGetComputeRunningProcesses` (pid, memory in bytes; None where NVML says "not available");
- `nvmlDeviceGetProcessUtilization(handle, lastSeenTs)`: the newest SM utilisation sample of each process
  that was busy since `lastSeenTs`. The reader keeps, per device, the newest timestamp seen (so each call
  hands out only new samples) and each process's newest sample; a process counts as busy with its newest
  sample's percent while that sample is younger than `window` seconds, else as idle. "Nothing to size"
  (NOT_FOUND, or SUCCESS for the size query) means no process was busy; NOT_SUPPORTED (or a driver
  without the call) means the device gives no per-process utilisation;
- `nvmlDeviceGetMemoryInfo` (used memory) and, on whole GPUs, `nvmlDeviceGetUtilizationRates` (busy %).
A device whose NVML calls fail (a lost GPU) is left out of that read and tried again on the next; a feature
the device lacks is an absent value. Thread-safe: reads are serialised by a lock.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pynvml

from agent.nvml_discovery import NvmlUnavailable, mig_profile_name

log = logging.getLogger("kgwe.agent.usage")

_SUCCESS = 0
_INVALID_ARGUMENT = 2
_NOT_SUPPORTED = 3
_NOT_FOUND = 6
_INSUFFICIENT_SIZE = 7
_DRIVER_NOT_LOADED = 9
_LIBRARY_NOT_FOUND = 12
_FUNCTION_NOT_FOUND = 13
_ABSENT = (_NOT_SUPPORTED, _FUNCTION_NOT_FOUND)
_NO_SAMPLES = (_SUCCESS, _NOT_FOUND)
_MIG_ENABLED = 1
_MIB = 1024 * 1024
# Bounds: a process list longer than this is cut (a GPU runs at most a few hundred contexts).
MAX_PROCESSES = 1024


@dataclass(frozen=True)
class ProcessUsage:
    pid: int
    memory_bytes: int | None  # None: NVML says not available
    sm_percent: float | None  # None: no per-process utilisation on this device


@dataclass
class DeviceUsage:
    """One device as the DCGM exporter names it: a whole GPU, or one MIG device (GPU instance) of a GPU."""

    gpu_index: int
    gpu_uuid: str
    model_name: str
    pci_bus_id: str
    minor_number: int
    mig_uuid: str | None = None
    gpu_instance_id: int | None = None
    mig_profile: str | None = None
    memory_used_bytes: int | None = None
    gpu_util_percent: int | None = None  # whole GPUs only (NVML, like DCGM, has none for MIG devices)
    processes: list[ProcessUsage] = field(default_factory=list)
    processes_known: bool = True  # False: NVML lists no processes here (too old a driver, not supported)
    process_utilization: bool = False  # whether NVML gives per-process SM utilisation here

    @property
    def key(self) -> str:
        """The id PodResources names it by: the MIG device's UUID, else the GPU's."""
        return self.mig_uuid or self.gpu_uuid


@dataclass
class UsageRead:
    devices: list[DeviceUsage]
    driver_version: str | None = None
    failed: list[str] = field(default_factory=list)  # "GPU 3: <call>: <error>" per device left out


def _text(value: str | bytes) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


class _DeviceFailed(Exception):
    pass


@dataclass
class _Samples:
    """Per device: the newest timestamp NVML handed out, and each process's newest (timestamp, percent)."""

    last_seen_us: int = 0
    newest: dict[int, tuple[int, int]] = field(default_factory=dict)


class UsageReader:
    """Reads usage on demand (one `read()` per scrape). `open()` initialises NVML once for the reader's life."""

    def __init__(
        self,
        nvml: Any = pynvml,
        window: float = 30.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.nvml = nvml
        self.window_us = int(window * 1_000_000)
        self.clock = clock
        self._lock = threading.Lock()
        self._samples: dict[str, _Samples] = {}
        self._open = False

    # ---- life ---------------------------------------------------------------------------------------
    def open(self) -> None:
        with self._lock:
            if self._open:
                return
            try:
                self.nvml.nvmlInit()
            except self.nvml.NVMLError as err:
                if err.value in (_LIBRARY_NOT_FOUND, _DRIVER_NOT_LOADED):
                    raise NvmlUnavailable(str(err)) from err
                raise
            self._open = True

    def close(self) -> None:
        with self._lock:
            if self._open:
                self._open = False
                self.nvml.nvmlShutdown()

    # ---- reading ------------------------------------------------------------------------------------
    def read(self) -> UsageRead:
        with self._lock:
            if not self._open:
                raise NvmlUnavailable("the usage reader is not open")
            now_us = int(self.clock() * 1_000_000)
            result = UsageRead(devices=[], driver_version=self._optional_text("nvmlSystemGetDriverVersion"))
            seen: set[str] = set()
            for index in range(self.nvml.nvmlDeviceGetCount()):
                try:
                    devices = self._gpu(index, now_us)
                except _DeviceFailed as failure:
                    result.failed.append(f"GPU {index}: {failure}")
                    continue
                result.devices.extend(devices)
                seen.update(d.key for d in devices)
            # Devices gone (a MIG layout changed) take their samples with them.
            for key in set(self._samples) - seen:
                del self._samples[key]
            return result

    def _call(self, name: str, *args: Any) -> Any:
        try:
            return getattr(self.nvml, name)(*args)
        except self.nvml.NVMLError as err:
            raise _DeviceFailed(f"{name}: {err}") from err

    def _optional(self, name: str, *args: Any, absent: tuple[int, ...] = _ABSENT) -> Any:
        try:
            return getattr(self.nvml, name)(*args)
        except self.nvml.NVMLError as err:
            if err.value in absent:
                return None
            raise _DeviceFailed(f"{name}: {err}") from err

    def _optional_text(self, name: str) -> str | None:
        try:
            return _text(getattr(self.nvml, name)())
        except self.nvml.NVMLError:
            return None

    def _gpu(self, index: int, now_us: int) -> list[DeviceUsage]:
        handle = self._call("nvmlDeviceGetHandleByIndex", index)
        uuid = _text(self._call("nvmlDeviceGetUUID", handle))
        base = DeviceUsage(
            gpu_index=index,
            gpu_uuid=uuid,
            model_name=_text(self._call("nvmlDeviceGetName", handle)),
            pci_bus_id=_text(self._call("nvmlDeviceGetPciInfo", handle).busId),
            minor_number=self._minor(handle, index),
        )
        mode = self._optional("nvmlDeviceGetMigMode", handle)
        if mode is not None and mode[0] == _MIG_ENABLED:
            total = int(self._call("nvmlDeviceGetMemoryInfo", handle).total)
            devices = []
            for slot in range(self._call("nvmlDeviceGetMaxMigDeviceCount", handle)):
                # Empty slots answer NOT_FOUND.
                mig = self._optional("nvmlDeviceGetMigDeviceHandleByIndex", handle, slot,
                                     absent=(_NOT_FOUND, _INVALID_ARGUMENT))
                if mig is not None:
                    devices.append(self._mig(mig, base, total, now_us))
            return devices
        utilization = self._optional("nvmlDeviceGetUtilizationRates", handle)
        base.gpu_util_percent = None if utilization is None else int(utilization.gpu)
        self._fill(handle, base, now_us)
        return [base]

    def _minor(self, handle: Any, index: int) -> int:
        minor = self._optional("nvmlDeviceGetMinorNumber", handle)
        return index if minor is None else int(minor)

    def _mig(self, handle: Any, base: DeviceUsage, parent_total: int, now_us: int) -> DeviceUsage:
        attributes = self._call("nvmlDeviceGetAttributes", handle)
        slices = int(attributes.gpuInstanceSliceCount)
        device = DeviceUsage(
            gpu_index=base.gpu_index,
            gpu_uuid=base.gpu_uuid,
            model_name=base.model_name,
            pci_bus_id=base.pci_bus_id,
            minor_number=base.minor_number,
            mig_uuid=_text(self._call("nvmlDeviceGetUUID", handle)),
            gpu_instance_id=int(self._call("nvmlDeviceGetGpuInstanceId", handle)),
            # The GPU instance's profile (`3g.40gb`), as DCGM's GPU_I_PROFILE: compute instances inside it
            # are not devices of their own here.
            mig_profile=mig_profile_name(slices, slices, int(attributes.memorySizeMB), parent_total),
        )
        self._fill(handle, device, now_us)
        return device

    def _fill(self, handle: Any, device: DeviceUsage, now_us: int) -> None:
        device.memory_used_bytes = int(self._call("nvmlDeviceGetMemoryInfo", handle).used)
        running = self._processes(handle)
        if running is None:
            device.processes_known = False
            self._samples.pop(device.key, None)
            return
        busy = self._utilisation(handle, device.key, {pid for pid, _ in running}, now_us)
        device.process_utilization = busy is not None
        device.processes = [
            ProcessUsage(pid, memory, None if busy is None else float(busy.get(pid, 0)))
            for pid, memory in running
        ]

    def _processes(self, handle: Any) -> list[tuple[int, int | None]] | None:
        """(pid, memory bytes) of the device's compute processes; None when NVML lists none here."""
        # pynvml sizes its buffer twice the count it was told: a process starting between its two calls
        # fits; more than that answers INSUFFICIENT_SIZE, and one more try reads the new list.
        # A driver without the _v3 call (before R510) has _v2, with the same structure.
        calls = ["nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetComputeRunningProcesses_v2"]
        attempt = 0
        while True:
            try:
                found = getattr(self.nvml, calls[0])(handle)
                break
            except self.nvml.NVMLError as err:
                if err.value == _INSUFFICIENT_SIZE and attempt == 0:
                    attempt += 1
                    continue
                if err.value in _ABSENT:
                    return None
                raise _DeviceFailed(f"{calls[0]}: {err}") from err
            except pynvml.NVMLLibraryMismatchError:
                calls.pop(0)
                if not calls:
                    return None
        out: dict[int, int | None] = {}
        for process in found[:MAX_PROCESSES]:
            memory = process.usedGpuMemory
            out[int(process.pid)] = None if memory is None else int(memory)
        return sorted(out.items())

    def _utilisation(self, handle: Any, key: str, running: set[int], now_us: int) -> dict[int, int] | None:
        """pid -> SM percent of each running process busy within the window (absent pids were idle);
        None when the device has no per-process utilisation."""
        state = self._samples.setdefault(key, _Samples())
        try:
            samples = self.nvml.nvmlDeviceGetProcessUtilization(handle, state.last_seen_us)
        except self.nvml.NVMLError as err:
            if err.value in _ABSENT:
                self._samples.pop(key, None)
                return None
            if err.value not in _NO_SAMPLES:
                raise _DeviceFailed(f"nvmlDeviceGetProcessUtilization: {err}") from err
            samples = []
        for sample in samples[:MAX_PROCESSES]:
            stamp, pid = int(sample.timeStamp), int(sample.pid)
            state.last_seen_us = max(state.last_seen_us, stamp)
            if pid in running and stamp >= state.newest.get(pid, (0, 0))[0]:
                state.newest[pid] = (stamp, int(sample.smUtil))
        # Processes gone, and samples too old to say anything about now, are forgotten.
        oldest = now_us - self.window_us
        state.newest = {pid: s for pid, s in state.newest.items() if pid in running and s[0] >= oldest}
        return {pid: percent for pid, (_, percent) in state.newest.items()}
