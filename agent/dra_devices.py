"""Which GPU a DRA device is: the `uuid` attribute of the device in this node's ResourceSlices.

PodResources names a container's DRA devices by driver, pool and device name (`gpu-0`), not by GPU; the
driver's ResourceSlice for the node says each device's `uuid` (a GPU's, or a MIG device's), as NVIDIA's
DCGM exporter reads it. The slices (`resource.k8s.io/v1`, field selector `spec.nodeName`) are read at most
once per `refresh` seconds, and only when a claim names a device not known yet; a failure (no DRA API,
no permission) leaves such devices unmapped, says so once, and is tried again after `refresh`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from agent.podresources import ClaimDevice

log = logging.getLogger("kgwe.agent.dra")

DRA_GROUP, DRA_VERSION = "resource.k8s.io", "v1"
MAX_SLICES = 256
MAX_DEVICES_PER_SLICE = 128  # the API's own limit for one ResourceSlice

SliceReader = Callable[[], Iterable[dict[str, Any]]]


def slices_from_api(api_client: Any, node_name: str, timeout: float = 10.0) -> SliceReader:
    """Reads this node's ResourceSlices through the Kubernetes API (`list` on resourceslices)."""
    from kubernetes import client

    custom = client.CustomObjectsApi(api_client)

    def read() -> list[dict[str, Any]]:
        answer = custom.list_cluster_custom_object(
            DRA_GROUP, DRA_VERSION, "resourceslices", field_selector=f"spec.nodeName={node_name}",
            limit=MAX_SLICES, _request_timeout=timeout,
        )
        items = answer.get("items") if isinstance(answer, dict) else None
        return items if isinstance(items, list) else []

    return read


def _uuid(device: dict[str, Any], driver: str) -> str | None:
    attributes = device.get("attributes")
    if not isinstance(attributes, dict):
        return None
    raw = attributes.get("uuid", attributes.get(f"{driver}/uuid"))
    value = raw.get("string") if isinstance(raw, dict) else None
    return value if isinstance(value, str) and value else None


def device_uuids(slices: Iterable[dict[str, Any]]) -> dict[tuple[str, str, str], str]:
    """(driver, pool, device) -> uuid of every device with a `uuid` attribute."""
    found: dict[tuple[str, str, str], str] = {}
    for count, item in enumerate(slices):
        if count >= MAX_SLICES:
            break
        spec = item.get("spec") if isinstance(item, dict) else None
        if not isinstance(spec, dict):
            continue
        driver = str(spec.get("driver") or "")
        pool = spec.get("pool")
        pool_name = str(pool.get("name") or "") if isinstance(pool, dict) else ""
        devices = spec.get("devices")
        for device in devices[:MAX_DEVICES_PER_SLICE] if isinstance(devices, list) else []:
            if not isinstance(device, dict):
                continue
            uuid = _uuid(device, driver)
            if uuid is not None:
                found[(driver, pool_name, str(device.get("name") or ""))] = uuid
    return found


class DraDevices:
    """Maps a claim's device to the UUID of the GPU or MIG device behind it. Thread-safe."""

    def __init__(self, read_slices: SliceReader, refresh: float = 60.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.read_slices = read_slices
        self.refresh = refresh
        self.clock = clock
        self._lock = threading.Lock()
        self._known: dict[tuple[str, str, str], str] = {}
        self._read_at: float | None = None
        self._failing = False

    def uuid(self, claim: ClaimDevice) -> str | None:
        key = (claim.driver, claim.pool, claim.device)
        with self._lock:
            if key not in self._known and self._due():
                self._reload()
            return self._known.get(key)

    def _due(self) -> bool:
        return self._read_at is None or self.clock() - self._read_at >= self.refresh

    def _reload(self) -> None:
        self._read_at = self.clock()
        try:
            self._known = device_uuids(self.read_slices())
        except Exception as err:  # the API client raises many kinds; any of them leaves DRA devices unmapped
            if not self._failing:
                log.warning("reading this node's ResourceSlices failed (%s): DRA devices stay without pod labels; "
                            "retrying every %.0fs", err, self.refresh)
            self._failing = True
            return
        if self._failing:
            log.info("ResourceSlices read again: DRA devices are mapped to pods")
        self._failing = False
