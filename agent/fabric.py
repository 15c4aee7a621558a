"""GPU fabric (multi-node NVLink) membership: NVML's fabric info per GPU, and the node's clique from it.

The structures are declared here after the C header rather than taken from the Python binding: older
bindings declared `clusterUuid` as a NUL-terminated `c_char` array (decoded as text, cut at the first zero
byte) and `state` as a 4-byte int where C has one byte. The UUID is read as 16 raw bytes.
Validation follows GFD / go-nvlib: state COMPLETED, status SUCCESS, a non-zero cluster UUID, and one
identical (cluster UUID, clique id) on every GPU of the node.
"""

from __future__ import annotations

import ctypes
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from policies.vocabulary.topology_schema import Fabric

UUID_LEN = 16
STATE_NOT_SUPPORTED = 0
STATE_COMPLETED = 3
_SUCCESS = 0
_ERROR_NOT_SUPPORTED = 3
_ERROR_FUNCTION_NOT_FOUND = 13
_ERROR_ARGUMENT_VERSION_MISMATCH = 25


class _FabricInfoV1(ctypes.Structure):
    # nvmlGpuFabricInfo_t
    _fields_ = [
        ("clusterUuid", ctypes.c_ubyte * UUID_LEN),
        ("status", ctypes.c_uint),
        ("cliqueId", ctypes.c_uint),
        ("state", ctypes.c_ubyte),
    ]


class _FabricInfoV2(ctypes.Structure):
    # nvmlGpuFabricInfo_v2_t (nvmlGpuFabricInfoV_t)
    _fields_ = [
        ("version", ctypes.c_uint),
        ("clusterUuid", ctypes.c_ubyte * UUID_LEN),
        ("status", ctypes.c_uint),
        ("cliqueId", ctypes.c_uint),
        ("state", ctypes.c_ubyte),
        ("healthMask", ctypes.c_uint),
    ]


# NVML_STRUCT_VERSION(GpuFabricInfo, 2): the struct size with the version in the top byte.
FABRIC_INFO_V2 = ctypes.sizeof(_FabricInfoV2) | (2 << 24)


@dataclass(frozen=True)
class FabricInfo:
    """One GPU's fabric registration as NVML reports it."""

    cluster_uuid: bytes
    clique_id: int
    state: int
    status: int

    @property
    def attached(self) -> bool:
        return self.state == STATE_COMPLETED and self.status == _SUCCESS and any(self.cluster_uuid)

    @property
    def cluster_uuid_text(self) -> str:
        return str(uuid.UUID(bytes=self.cluster_uuid))


def _raw_uuid(info: ctypes.Structure, struct_type: type[ctypes.Structure]) -> bytes:
    offset = struct_type.clusterUuid.offset  # type: ignore[attr-defined]
    return ctypes.string_at(ctypes.addressof(info) + offset, UUID_LEN)


def read_fabric_info(nvml: Any, handle: Any) -> FabricInfo | None:
    """The GPU's fabric info, or None where the driver or GPU has no fabric support.

    Other NVML errors propagate: they mean the GPU failed, which the caller reports.
    """
    info_v2 = _FabricInfoV2(version=FABRIC_INFO_V2)
    try:
        nvml.nvmlDeviceGetGpuFabricInfoV(handle, ctypes.byref(info_v2))
        return FabricInfo(_raw_uuid(info_v2, _FabricInfoV2), info_v2.cliqueId, info_v2.state, info_v2.status)
    except nvml.NVMLError as err:
        if err.value == _ERROR_NOT_SUPPORTED:
            return None
        if err.value not in (_ERROR_FUNCTION_NOT_FOUND, _ERROR_ARGUMENT_VERSION_MISMATCH):
            raise
    # Older drivers have only the unversioned call.
    info_v1 = _FabricInfoV1()
    try:
        nvml.nvmlDeviceGetGpuFabricInfo(handle, ctypes.byref(info_v1))
    except nvml.NVMLError as err:
        if err.value in (_ERROR_NOT_SUPPORTED, _ERROR_FUNCTION_NOT_FOUND):
            return None
        raise
    return FabricInfo(_raw_uuid(info_v1, _FabricInfoV1), info_v1.cliqueId, info_v1.state, info_v1.status)


def node_clique(infos: Sequence[FabricInfo | None]) -> Fabric | None:
    """The node's NVLink clique: only when every GPU asked is attached to one and the same clique."""
    if not infos:
        return None
    keys = set()
    for info in infos:
        if info is None or not info.attached:
            return None
        keys.add((info.cluster_uuid, info.clique_id))
    if len(keys) != 1:
        return None
    cluster, clique_id = keys.pop()
    return Fabric(clusterUuid=str(uuid.UUID(bytes=cluster)), cliqueId=clique_id)
