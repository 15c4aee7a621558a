"""Which container holds which GPU: the kubelet's PodResources API (`v1.PodResourcesLister/List`) over its unix
socket (`/var/lib/kubelet/pod-resources/kubelet.sock`). Plain data out; nothing here knows NVML.

The few messages read are declared here, with the field names and numbers of the kubelet's
`k8s.io/kubelet/pkg/apis/podresources/v1` wire format, and built at run time into a private descriptor
pool; fields not declared (CPU ids, memory, NUMA topology, CDI devices) are skipped by the parser.
The call is a generic gRPC unary call with a deadline; the answer is read within bounds (pods, containers,
devices and claims per container, message size). A missing socket or a failed call raises
`PodResourcesUnavailable`; callers go on without pod labels and try again on the next read.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import grpc
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from agent.defaults import POD_RESOURCES_SOCKET

log = logging.getLogger("kgwe.agent.podresources")

DEFAULT_SOCKET = POD_RESOURCES_SOCKET
LIST_METHOD = "/v1.PodResourcesLister/List"

# Bounds on one answer. The kubelet runs at most a few hundred pods (110 by default).
MAX_MESSAGE_BYTES = 16 * 1024 * 1024
MAX_PODS = 2048
MAX_CONTAINERS = 64  # per pod
MAX_DEVICE_IDS = 256  # per container, over its GPU resources
MAX_CLAIM_DEVICES = 256  # per container, over its claims
MAX_TEXT = 253  # a Kubernetes name's longest

_STRING = descriptor_pb2.FieldDescriptorProto.TYPE_STRING
_MESSAGE = descriptor_pb2.FieldDescriptorProto.TYPE_MESSAGE
_OPTIONAL = descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL
_REPEATED = descriptor_pb2.FieldDescriptorProto.LABEL_REPEATED

# message -> (field name, number, repeated, type: a message name or None for string); podresources/v1.
_MESSAGES: dict[str, list[tuple[str, int, bool, str | None]]] = {
    "ListPodResourcesRequest": [],
    "ListPodResourcesResponse": [("pod_resources", 1, True, "PodResources")],
    "PodResources": [
        ("name", 1, False, None),
        ("namespace", 2, False, None),
        ("containers", 3, True, "ContainerResources"),
    ],
    "ContainerResources": [
        ("name", 1, False, None),
        ("devices", 2, True, "ContainerDevices"),
        ("dynamic_resources", 5, True, "DynamicResource"),
    ],
    "ContainerDevices": [("resource_name", 1, False, None), ("device_ids", 2, True, None)],
    "DynamicResource": [
        ("claim_name", 2, False, None),
        ("claim_namespace", 3, False, None),
        ("claim_resources", 4, True, "ClaimResource"),
    ],
    "ClaimResource": [("driver_name", 2, False, None), ("pool_name", 3, False, None), ("device_name", 4, False, None)],
}


def _message_classes() -> dict[str, Any]:
    proto = descriptor_pb2.FileDescriptorProto(name="kgwe/agent/podresources_v1.proto", package="v1", syntax="proto3")
    for name, fields in _MESSAGES.items():
        message = proto.message_type.add(name=name)
        for field_name, number, repeated, kind in fields:
            message.field.add(
                name=field_name,
                number=number,
                label=_REPEATED if repeated else _OPTIONAL,
                type=_MESSAGE if kind else _STRING,
                type_name=f".v1.{kind}" if kind else None,
            )
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    return {name: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"v1.{name}")) for name in _MESSAGES}


MESSAGES = _message_classes()


class PodResourcesUnavailable(RuntimeError):
    """The kubelet's PodResources API could not be read; the message says where and why."""


@dataclass(frozen=True)
class ClaimDevice:
    """A device a container holds through a DRA ResourceClaim."""

    claim_name: str
    claim_namespace: str
    driver: str
    pool: str
    device: str


@dataclass
class ContainerAllocation:
    namespace: str
    pod: str
    container: str
    device_ids: list[str] = field(default_factory=list)  # of its NVIDIA GPU resources, as the device plugin names them
    claims: list[ClaimDevice] = field(default_factory=list)


def is_gpu_resource(name: str) -> bool:
    """NVIDIA's device plugin resources: `nvidia.com/gpu` (and `.shared` when replicas are renamed) and the
    MIG resources `nvidia.com/mig-<profile>` of the mixed strategy."""
    return name == "nvidia.com/gpu" or name.startswith(("nvidia.com/gpu.", "nvidia.com/mig-"))


def _cut(text: str) -> str:
    return text[:MAX_TEXT]


def allocations(response: Any) -> list[ContainerAllocation]:
    """The containers of a `ListPodResourcesResponse` that hold an NVIDIA GPU resource or a DRA device."""
    out: list[ContainerAllocation] = []
    pods = response.pod_resources
    if len(pods) > MAX_PODS:
        log.warning("the kubelet lists %d pods; reading the first %d", len(pods), MAX_PODS)
    for pod in pods[:MAX_PODS]:
        for container in pod.containers[:MAX_CONTAINERS]:
            held = ContainerAllocation(_cut(pod.namespace), _cut(pod.name), _cut(container.name))
            for devices in container.devices:
                if is_gpu_resource(devices.resource_name):
                    room = MAX_DEVICE_IDS - len(held.device_ids)
                    held.device_ids.extend(_cut(d) for d in devices.device_ids[:max(0, room)])
            for claim in container.dynamic_resources:
                for resource in claim.claim_resources:
                    if len(held.claims) >= MAX_CLAIM_DEVICES:
                        break
                    held.claims.append(ClaimDevice(
                        _cut(claim.claim_name), _cut(claim.claim_namespace), _cut(resource.driver_name),
                        _cut(resource.pool_name), _cut(resource.device_name),
                    ))
            if held.device_ids or held.claims:
                out.append(held)
    return out


class PodResourcesClient:
    """Lists the node's GPU allocations; at most one call per `min_interval` seconds (later reads within it
    get the last answer or failure), each with a `timeout`. Thread-safe."""

    def __init__(
        self,
        socket_path: str = DEFAULT_SOCKET,
        timeout: float = 5.0,
        min_interval: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.socket_path = socket_path
        self.timeout = timeout
        self.min_interval = min_interval
        self.clock = clock
        self._lock = threading.Lock()
        self._channel: grpc.Channel | None = None
        self._last: tuple[float, list[ContainerAllocation] | PodResourcesUnavailable] | None = None

    def read(self) -> list[ContainerAllocation]:
        with self._lock:
            now = self.clock()
            if self._last is None or now - self._last[0] >= self.min_interval:
                try:
                    answer: list[ContainerAllocation] | PodResourcesUnavailable = self._call()
                except PodResourcesUnavailable as err:
                    answer = err
                self._last = (now, answer)
            result = self._last[1]
        if isinstance(result, PodResourcesUnavailable):
            raise result
        return result

    def close(self) -> None:
        with self._lock:
            self._drop()

    def _drop(self) -> None:
        if self._channel is not None:
            self._channel.close()
            self._channel = None

    def _call(self) -> list[ContainerAllocation]:
        if not os.path.exists(self.socket_path):
            self._drop()
            raise PodResourcesUnavailable(f"no kubelet PodResources socket at {self.socket_path}")
        if self._channel is None:
            self._channel = grpc.insecure_channel(
                f"unix://{os.path.abspath(self.socket_path)}",
                options=[
                    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
                    ("grpc.max_send_message_length", 1024),
                    ("grpc.enable_http_proxy", 0),
                ],
            )
        call = self._channel.unary_unary(
            LIST_METHOD,
            request_serializer=MESSAGES["ListPodResourcesRequest"].SerializeToString,
            response_deserializer=MESSAGES["ListPodResourcesResponse"].FromString,
        )
        try:
            response = call(MESSAGES["ListPodResourcesRequest"](), timeout=self.timeout)
        except grpc.RpcError as err:
            # A new channel next time: the kubelet recreates its socket when it restarts, and a fresh channel
            # connects at once instead of waiting out the old one's reconnect backoff.
            self._drop()
            code = err.code() if isinstance(err, grpc.Call) else None
            details = err.details() if isinstance(err, grpc.Call) else str(err)
            name = code.name if code is not None else "error"
            raise PodResourcesUnavailable(f"{LIST_METHOD} on {self.socket_path}: {name}: {details}") from None
        return allocations(response)
