"""NVML to plain data: what the node's GPUs are and how they are wired. No Kubernetes here.

Uses the `pynvml` module of NVIDIA's `nvidia-ml-py`. A feature a GPU or driver lacks (NOT_SUPPORTED,
FUNCTION_NOT_FOUND) is an absent value; any other NVML error on a GPU marks that GPU unhealthy with the
failing call in its error, and the scan goes on with the next GPU.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import pynvml

from agent.fabric import FabricInfo, read_fabric_info
from agent.nvlink import NvLinkPort, normalise_bus_id

# NVML return codes (nvmlReturn_t) that the scan treats specially.
_NOT_SUPPORTED = 3
_NOT_FOUND = 6
_DRIVER_NOT_LOADED = 9
_LIBRARY_NOT_FOUND = 12
_FUNCTION_NOT_FOUND = 13
_INVALID_ARGUMENT = 2
_ABSENT = (_NOT_SUPPORTED, _FUNCTION_NOT_FOUND)
_NO_NVML = (_LIBRARY_NOT_FOUND, _DRIVER_NOT_LOADED)

_MIG_ENABLED = 1
_LINK_ACTIVE = 1
_NUMA_WORDS = 4  # 64-bit words of the NUMA node mask: 256 nodes
_COMPUTE_MODES = {0: "default", 1: "exclusive-thread", 2: "prohibited", 3: "exclusive-process"}


class NvmlUnavailable(RuntimeError):
    """No usable NVML on this node: no driver, no library, so no NVIDIA GPUs to report."""


@dataclass(frozen=True)
class MigDevice:
    profile: str
    uuid: str | None
    gpu_instance_id: int | None
    compute_instance_id: int | None
    memory_mib: int | None


@dataclass
class GpuInfo:
    index: int
    healthy: bool = True
    error: str | None = None
    uuid: str = ""
    name: str = ""
    memory_mib: int = 0
    pci_bus_id: str | None = None
    numa_node: int | None = None
    compute_capability: str | None = None
    nvlinks: list[NvLinkPort] = field(default_factory=list)
    mig_enabled: bool = False
    mig_devices: list[MigDevice] = field(default_factory=list)
    compute_mode: str | None = None
    fabric: FabricInfo | None = None


@dataclass
class NodeScan:
    driver_version: str | None
    cuda_driver_version: str | None
    gpus: list[GpuInfo]


class _GpuFailed(Exception):
    def __init__(self, call: str, error: Exception) -> None:
        super().__init__(f"{call}: {error}")


def _text(value: str | bytes) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


class _Scanner:
    def __init__(self, nvml: Any) -> None:
        self.nvml = nvml

    def call(self, name: str, *args: Any) -> Any:
        try:
            return getattr(self.nvml, name)(*args)
        except self.nvml.NVMLError as err:
            raise _GpuFailed(name, err) from err

    def optional(self, name: str, *args: Any, absent: tuple[int, ...] = _ABSENT) -> Any:
        try:
            return getattr(self.nvml, name)(*args)
        except self.nvml.NVMLError as err:
            if err.value in absent:
                return None
            raise _GpuFailed(name, err) from err

    def gpu(self, index: int) -> GpuInfo:
        info = GpuInfo(index=index)
        try:
            self._fill(info)
        except _GpuFailed as failure:
            info.healthy = False
            info.error = str(failure)
        return info

    def _fill(self, info: GpuInfo) -> None:
        handle = self.call("nvmlDeviceGetHandleByIndex", info.index)
        # The bus id first: it is what peers' links name, so a GPU failing later still shows in their rows.
        pci = self.call("nvmlDeviceGetPciInfo", handle)
        info.pci_bus_id = normalise_bus_id(_text(pci.busId))
        info.uuid = _text(self.call("nvmlDeviceGetUUID", handle))
        info.name = _text(self.call("nvmlDeviceGetName", handle))
        memory = self.call("nvmlDeviceGetMemoryInfo", handle)
        info.memory_mib = int(memory.total) // (1024 * 1024)
        capability = self.optional("nvmlDeviceGetCudaComputeCapability", handle)
        if capability is not None:
            info.compute_capability = f"{capability[0]}.{capability[1]}"
        info.numa_node = self._numa_node(handle)
        info.nvlinks = self._nvlinks(handle)
        mode = self.optional("nvmlDeviceGetMigMode", handle)
        info.mig_enabled = mode is not None and mode[0] == _MIG_ENABLED
        if info.mig_enabled:
            info.mig_devices = self._mig_devices(handle, int(memory.total))
        compute_mode = self.optional("nvmlDeviceGetComputeMode", handle)
        info.compute_mode = None if compute_mode is None else _COMPUTE_MODES.get(compute_mode, str(compute_mode))
        try:
            info.fabric = read_fabric_info(self.nvml, handle)
        except self.nvml.NVMLError as err:
            raise _GpuFailed("nvmlDeviceGetGpuFabricInfoV", err) from err

    def _numa_node(self, handle: Any) -> int | None:
        mask = self.optional(
            "nvmlDeviceGetMemoryAffinity", handle, _NUMA_WORDS, self.nvml.NVML_AFFINITY_SCOPE_NODE
        )
        if mask is None:
            return None
        nodes = [word * 64 + bit for word in range(len(mask)) for bit in range(64) if int(mask[word]) >> bit & 1]
        # A GPU close to several NUMA nodes (or to none the kernel knows of) has no single affinity.
        return nodes[0] if len(nodes) == 1 else None

    def _nvlinks(self, handle: Any) -> list[NvLinkPort]:
        ports: list[NvLinkPort] = []
        for link in range(self.nvml.NVML_NVLINK_MAX_LINKS):
            # A GPU without NVLink answers NOT_SUPPORTED; a link index past the GPU's own links INVALID_ARGUMENT.
            state = self.optional(
                "nvmlDeviceGetNvLinkState", handle, link, absent=(*_ABSENT, _INVALID_ARGUMENT)
            )
            if state is None:
                break
            if state != _LINK_ACTIVE:
                continue
            remote = self.call("nvmlDeviceGetNvLinkRemotePciInfo", handle, link)
            remote_type = self.optional("nvmlDeviceGetNvLinkRemoteDeviceType", handle, link)
            ports.append(NvLinkPort(link, _text(remote.busId), 0xFF if remote_type is None else int(remote_type)))
        return ports

    def _mig_devices(self, handle: Any, total_bytes: int) -> list[MigDevice]:
        devices: list[MigDevice] = []
        for slot in range(self.call("nvmlDeviceGetMaxMigDeviceCount", handle)):
            # Empty slots answer NOT_FOUND.
            mig = self.optional("nvmlDeviceGetMigDeviceHandleByIndex", handle, slot, absent=(_NOT_FOUND,))
            if mig is None:
                continue
            attributes = self.call("nvmlDeviceGetAttributes", mig)
            uuid = self.optional("nvmlDeviceGetUUID", mig)
            devices.append(
                MigDevice(
                    profile=mig_profile_name(
                        attributes.gpuInstanceSliceCount,
                        attributes.computeInstanceSliceCount,
                        int(attributes.memorySizeMB),
                        total_bytes,
                    ),
                    uuid=None if uuid is None else _text(uuid),
                    gpu_instance_id=self.optional("nvmlDeviceGetGpuInstanceId", mig),
                    compute_instance_id=self.optional("nvmlDeviceGetComputeInstanceId", mig),
                    memory_mib=int(attributes.memorySizeMB),
                )
            )
        return devices


def mig_profile_name(gi_slices: int, ci_slices: int, memory_mib: int, parent_total_bytes: int) -> str:
    """The MIG profile name the device plugin and GFD use, e.g. `1g.10gb` or `1c.2g.20gb`.

    Memory in the name is the instance's share of the GPU rounded up to eighths of the GPU's whole-GB size,
    as go-nvlib computes it (a 1g.10gb slice of an A100-80GB has 9728 MiB, not 10 GiB).
    """
    gib = 1024**3
    fraction = memory_mib * 1024 * 1024 / parent_total_bytes if parent_total_bytes else 0.0
    fraction = math.ceil(fraction * 8) / 8
    total_gb = (parent_total_bytes + gib - 1) // gib
    memory_gb = round(fraction * total_gb)
    gi = f"{gi_slices}g.{memory_gb}gb"
    return gi if ci_slices == gi_slices else f"{ci_slices}c.{gi}"


def scan(nvml: Any = pynvml) -> NodeScan:
    """One full scan of the node's GPUs. Raises NvmlUnavailable when the node has no NVML at all."""
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as err:
        if err.value in _NO_NVML:
            raise NvmlUnavailable(str(err)) from err
        raise
    try:
        scanner = _Scanner(nvml)
        driver = _optional_text(nvml, "nvmlSystemGetDriverVersion")
        cuda = _optional_int(nvml, "nvmlSystemGetCudaDriverVersion")
        count = nvml.nvmlDeviceGetCount()
        return NodeScan(
            driver_version=driver,
            cuda_driver_version=None if cuda is None else f"{cuda // 1000}.{cuda % 1000 // 10}",
            gpus=[scanner.gpu(index) for index in range(count)],
        )
    finally:
        nvml.nvmlShutdown()


def _optional_text(nvml: Any, name: str) -> str | None:
    value = _optional_call(nvml, name)
    return None if value is None else _text(value)


def _optional_int(nvml: Any, name: str) -> int | None:
    value = _optional_call(nvml, name)
    return None if value is None else int(value)


def _optional_call(nvml: Any, name: str) -> Any:
    try:
        return getattr(nvml, name)()
    except nvml.NVMLError as err:
        if err.value in _ABSENT:
            return None
        raise
