"""The agent's own `/metrics`: GPU usage under the names and labels of NVIDIA's DCGM exporter (SPEC section 11),
for clusters where no DCGM exporter runs, so that one scrape configuration and KGWE's usage reader
(`webhook/usage/promql.py`) serve both. Evaluated per scrape (a custom collector): nothing is cached but
NVML's sample bookkeeping (agent/usage_nvml.py) and the PodResources answer of the last second.

Series, one per device (a whole GPU, or a MIG device of a GPU in MIG mode), or, where containers hold the
device, one per pod holding it with `namespace`, `pod`, `container` (a device several containers of one pod
share is one series, labelled with the first of them; a device several pods share has one series per pod,
each with the device's figures, as NVML cannot tell which process is whose without the host's pid space):
- `DCGM_FI_DEV_FB_USED` (MiB): a held device, the memory of its processes (per-process memory, which leaves
  out what the driver keeps for itself); a device no pod holds, or one whose process memory NVML does not
  give, the device's used memory;
- `DCGM_FI_DEV_GPU_UTIL` (%): NVML's busy percent of a whole GPU; none for MIG devices, as DCGM;
- `DCGM_FI_PROF_GR_ENGINE_ACTIVE` (0..1): the sum of the device's processes' SM utilisation (NVML's
  per-process samples: the share of time a kernel of that process ran), capped at 1. It approximates DCGM's
  engine-active ratio (time the graphics/compute engine was busy) as NVML's own utilisation does; only where
  NVML gives per-process utilisation (MIG devices often do not).
Labels as the DCGM exporter's: `gpu`, `UUID` (the GPU's, for MIG devices their parent's), `pci_bus_id`,
`device` (`nvidia<minor>`), `modelName`, `Hostname` (the node name), `DCGM_FI_DRIVER_VERSION`, for MIG devices
`GPU_I_PROFILE` and `GPU_I_ID`, and for DRA devices `dra_claim_name`, `dra_claim_namespace`,
`dra_driver_name`, `dra_pool_name`, `dra_device_name`. Plus the agent's own `kgwe_agent_nvml_up` and
`kgwe_agent_pod_resources_up` (1 or 0).
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import pynvml
from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from agent.defaults import METRICS_PORT
from agent.dra_devices import DraDevices
from agent.nvml_discovery import NvmlUnavailable
from agent.podresources import ContainerAllocation, PodResourcesClient, PodResourcesUnavailable
from agent.usage_nvml import DeviceUsage, UsageRead, UsageReader

log = logging.getLogger("kgwe.agent.metrics")

FB_USED = "DCGM_FI_DEV_FB_USED"
GPU_UTIL = "DCGM_FI_DEV_GPU_UTIL"
ENGINE_ACTIVE = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
NVML_UP = "kgwe_agent_nvml_up"
POD_RESOURCES_UP = "kgwe_agent_pod_resources_up"
DEFAULT_PORT = METRICS_PORT
_MIB = 1024 * 1024
# Device ids as device plugins write them: a time-sliced replica `GPU-…::3`; GKE's `nvidia0`, `nvidia0/gi1`,
# with `/vgpu2` for a shared one.
_REPLICA = re.compile(r"::[0-9]+$")
_GKE = re.compile(r"^(nvidia[0-9]+(?:/gi[0-9]+)?)(?:/vgpu[0-9]+)?$")


@dataclass(frozen=True)
class Holder:
    namespace: str
    pod: str
    container: str
    dra: tuple[tuple[str, str], ...] = ()  # the DRA labels, for a device held through a claim


def device_id_key(device_id: str) -> str:
    """The key a device plugin's device id finds its device by: a GPU or MIG UUID, or GKE's `nvidiaN[/giM]`."""
    found = _GKE.match(device_id)
    if found:
        return found.group(1)
    return _REPLICA.sub("", device_id)


def _index(devices: Iterable[DeviceUsage]) -> dict[str, DeviceUsage]:
    index: dict[str, DeviceUsage] = {}
    for device in devices:
        index[device.key] = device
        name = f"nvidia{device.minor_number}"
        index[name if device.gpu_instance_id is None else f"{name}/gi{device.gpu_instance_id}"] = device
    return index


def holders(devices: list[DeviceUsage], allocations: list[ContainerAllocation],
            dra: DraDevices | None) -> dict[str, list[Holder]]:
    """Device key -> the pods holding it (one holder per pod: its first container that holds it)."""
    index = _index(devices)
    out: dict[str, list[Holder]] = {}

    def hold(device: DeviceUsage | None, holder: Holder) -> None:
        if device is None:
            return
        found = out.setdefault(device.key, [])
        if not any((h.namespace, h.pod) == (holder.namespace, holder.pod) for h in found):
            found.append(holder)

    for held in allocations:
        plain = Holder(held.namespace, held.pod, held.container)
        for device_id in held.device_ids:
            hold(index.get(device_id_key(device_id)), plain)
        for claim in held.claims:
            uuid = dra.uuid(claim) if dra is not None else None
            if uuid is None:
                continue
            hold(index.get(uuid), Holder(held.namespace, held.pod, held.container, (
                ("dra_claim_name", claim.claim_name), ("dra_claim_namespace", claim.claim_namespace),
                ("dra_driver_name", claim.driver), ("dra_pool_name", claim.pool), ("dra_device_name", claim.device),
            )))
    return out


def _device_labels(device: DeviceUsage, hostname: str, driver: str | None) -> dict[str, str]:
    labels = {
        "gpu": str(device.gpu_index),
        "UUID": device.gpu_uuid,
        "pci_bus_id": device.pci_bus_id,
        "device": f"nvidia{device.minor_number}",
        "modelName": device.model_name,
        "Hostname": hostname,
        "DCGM_FI_DRIVER_VERSION": driver or "",
    }
    if device.gpu_instance_id is not None:
        labels["GPU_I_PROFILE"] = device.mig_profile or ""
        labels["GPU_I_ID"] = str(device.gpu_instance_id)
    return labels


def _memory_mib(device: DeviceUsage, held: bool) -> float | None:
    if held and device.processes_known and all(p.memory_bytes is not None for p in device.processes):
        return round(sum(p.memory_bytes or 0 for p in device.processes) / _MIB)
    return None if device.memory_used_bytes is None else round(device.memory_used_bytes / _MIB)


def _engine_active(device: DeviceUsage) -> float | None:
    if not (device.processes_known and device.process_utilization):
        return None
    return min(1.0, sum(p.sm_percent or 0.0 for p in device.processes) / 100.0)


def families(read: UsageRead, held: dict[str, list[Holder]], hostname: str) -> list[Metric]:
    """The three DCGM families of one read."""
    memory = Metric(FB_USED, "Framebuffer memory used (in MiB).", "gauge")
    util = Metric(GPU_UTIL, "GPU utilization (in %).", "gauge")
    active = Metric(ENGINE_ACTIVE, "Ratio of time the graphics engine is active (from NVML per-process SM "
                    "utilisation).", "gauge")
    for device in read.devices:
        base = _device_labels(device, hostname, read.driver_version)
        pods = held.get(device.key, [])
        series = [
            {**base, "namespace": h.namespace, "pod": h.pod, "container": h.container, **dict(h.dra)} for h in pods
        ] or [base]
        values = (
            (memory, _memory_mib(device, bool(pods))),
            (util, device.gpu_util_percent),
            (active, _engine_active(device)),
        )
        for family, value in values:
            if value is None:
                continue
            for labels in series:
                family.add_sample(family.name, labels, float(value))
    return [memory, util, active]


class UsageCollector(Collector):
    """Reads NVML and the kubelet on every collect (scrape); never raises into the HTTP server."""

    def __init__(self, reader: UsageReader, pod_resources: PodResourcesClient | None, dra: DraDevices | None,
                 hostname: str) -> None:
        self.reader = reader
        self.pod_resources = pod_resources
        self.dra = dra
        self.hostname = hostname
        self._lock = threading.Lock()
        self._problems: dict[str, str | None] = {"nvml": None, "pod-resources": None}

    def describe(self) -> list[Metric]:
        return []  # registering must not read NVML

    def _report(self, source: str, problem: str | None, what: str) -> None:
        """One warning when a source starts failing (or fails differently), one line when it recovers."""
        with self._lock:
            before = self._problems[source]
            self._problems[source] = problem
        if problem is not None and problem != before:
            log.warning("%s: %s; %s (tried again on every scrape)", source, problem, what)
        elif problem is None and before is not None:
            log.info("%s: read again", source)

    def collect(self) -> Iterator[Metric]:
        read: UsageRead | None = None
        try:
            read = self.reader.read()
        except (NvmlUnavailable, pynvml.NVMLError) as err:
            self._report("nvml", str(err), "no GPU series")
        else:
            self._report("nvml", None, "")
            for failed in read.failed:
                log.debug("usage read: %s", failed)
        allocations: list[ContainerAllocation] = []
        pods_up = 0.0
        if self.pod_resources is not None:
            try:
                allocations = self.pod_resources.read()
                pods_up = 1.0
                self._report("pod-resources", None, "")
            except PodResourcesUnavailable as err:
                self._report("pod-resources", str(err), "GPU series carry no pod labels")
        if read is not None:
            yield from families(read, holders(read.devices, allocations, self.dra), self.hostname)
        yield GaugeMetricFamily(NVML_UP, "1 when the agent could read NVML on the last scrape.",
                                value=0.0 if read is None else 1.0)
        yield GaugeMetricFamily(POD_RESOURCES_UP, "1 when the kubelet's PodResources API answered on the last "
                                "scrape (0 also when it is not configured).", value=pods_up)


def registry_for(collector: UsageCollector) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    return registry


class MetricsServer:
    """`/metrics` over plain HTTP on `address:port` (as the DCGM exporter serves it), in a daemon thread."""

    def __init__(self, collector: UsageCollector, port: int, address: str = "0.0.0.0") -> None:
        self.registry = registry_for(collector)
        self._server: Any
        self._server, self._thread = start_http_server(port, addr=address, registry=self.registry)

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
