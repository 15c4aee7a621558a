"""A fake kubelet PodResources server: `v1.PodResourcesLister/List` over gRPC on a unix socket.

Its messages are declared here on their own, with every field of the kubelet's podresources/v1 wire format
(CPU ids, memory, NUMA topology, CDI devices, share ids too), so the agent's smaller declarations are tested
against answers carrying fields they skip, as a real kubelet's do. A test sets the pods it lists, and may
make it fail (a gRPC status) or stall (to hit the agent's deadline).
"""

from __future__ import annotations

import shutil
import tempfile
import threading
from collections.abc import Iterator
from concurrent import futures
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

_F = descriptor_pb2.FieldDescriptorProto
_TYPES = {"string": _F.TYPE_STRING, "int64": _F.TYPE_INT64, "uint64": _F.TYPE_UINT64}

# message -> (name, number, repeated, type); the whole of podresources/v1's List answer.
_WIRE: dict[str, list[tuple[str, int, bool, str]]] = {
    "ListPodResourcesRequest": [],
    "ListPodResourcesResponse": [("pod_resources", 1, True, "PodResources")],
    "PodResources": [("name", 1, False, "string"), ("namespace", 2, False, "string"),
                     ("containers", 3, True, "ContainerResources"), ("cpu_ids", 4, True, "int64"),
                     ("memory", 5, True, "ContainerMemory")],
    "ContainerResources": [("name", 1, False, "string"), ("devices", 2, True, "ContainerDevices"),
                           ("cpu_ids", 3, True, "int64"), ("memory", 4, True, "ContainerMemory"),
                           ("dynamic_resources", 5, True, "DynamicResource")],
    "ContainerMemory": [("memory_type", 1, False, "string"), ("size", 2, False, "uint64"),
                        ("topology", 3, False, "TopologyInfo")],
    "ContainerDevices": [("resource_name", 1, False, "string"), ("device_ids", 2, True, "string"),
                         ("topology", 3, False, "TopologyInfo")],
    "TopologyInfo": [("nodes", 1, True, "NUMANode")],
    "NUMANode": [("ID", 1, False, "int64")],
    "DynamicResource": [("claim_name", 2, False, "string"), ("claim_namespace", 3, False, "string"),
                        ("claim_resources", 4, True, "ClaimResource")],
    "ClaimResource": [("cdi_devices", 1, True, "CDIDevice"), ("driver_name", 2, False, "string"),
                      ("pool_name", 3, False, "string"), ("device_name", 4, False, "string")],
    "CDIDevice": [("name", 1, False, "string")],
}


def _classes() -> dict[str, Any]:
    proto = descriptor_pb2.FileDescriptorProto(name="tests/kubelet_podresources_v1.proto", package="v1",
                                               syntax="proto3")
    for name, fields in _WIRE.items():
        message = proto.message_type.add(name=name)
        for field_name, number, repeated, kind in fields:
            scalar = _TYPES.get(kind)
            message.field.add(name=field_name, number=number,
                              label=_F.LABEL_REPEATED if repeated else _F.LABEL_OPTIONAL,
                              type=scalar or _F.TYPE_MESSAGE, type_name=None if scalar else f".v1.{kind}")
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    return {name: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"v1.{name}")) for name in _WIRE}


WIRE = _classes()


@dataclass
class Claim:
    claim_name: str
    claim_namespace: str
    driver: str
    pool: str
    device: str


@dataclass
class Container:
    name: str
    devices: dict[str, list[str]] = field(default_factory=dict)  # resource name -> device ids
    claims: list[Claim] = field(default_factory=list)


@dataclass
class Pod:
    namespace: str
    name: str
    containers: list[Container]


def response(pods: list[Pod]) -> Any:
    answer = WIRE["ListPodResourcesResponse"]()
    for pod in pods:
        out = answer.pod_resources.add(name=pod.name, namespace=pod.namespace)
        out.cpu_ids.extend([0, 1])
        out.memory.add(memory_type="memory", size=1 << 30)
        for container in pod.containers:
            held = out.containers.add(name=container.name)
            held.cpu_ids.extend([2, 3])
            held.memory.add(memory_type="hugepages-2Mi", size=2 << 20).topology.nodes.add(ID=0)
            for resource, ids in container.devices.items():
                devices = held.devices.add(resource_name=resource)
                devices.device_ids.extend(ids)
                devices.topology.nodes.add(ID=1)
            for claim in container.claims:
                dynamic = held.dynamic_resources.add(claim_name=claim.claim_name,
                                                     claim_namespace=claim.claim_namespace)
                resource = dynamic.claim_resources.add(driver_name=claim.driver, pool_name=claim.pool,
                                                       device_name=claim.device)
                resource.cdi_devices.add(name=f"k8s.{claim.driver}/claim={claim.claim_name}-{claim.device}")
    return answer


@dataclass
class Kubelet:
    socket: Path
    pods: list[Pod] = field(default_factory=list)
    calls: int = 0
    # A gRPC status to answer with instead of the pods; seconds to stall before answering.
    fail: grpc.StatusCode | None = None
    stall: float = 0.0
    lock: threading.Lock = field(default_factory=threading.Lock)
    # Set when the kubelet stops serving: a stalled answer ends then, not `stall` seconds later.
    stopped: threading.Event = field(default_factory=threading.Event)

    def list(self, request: Any, context: grpc.ServicerContext) -> Any:
        with self.lock:
            self.calls += 1
            pods, fail, stall = list(self.pods), self.fail, self.stall
        if stall:
            self.stopped.wait(stall)
        if fail is not None:
            context.abort(fail, "injected")
        return response(pods)


@contextmanager
def short_dir() -> Iterator[Path]:
    """A directory with a short path: a unix socket's path must stay under 108 bytes."""
    path = Path(tempfile.mkdtemp(prefix="kgwe-pr-", dir="/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@contextmanager
def serving(kubelet: Kubelet) -> Iterator[Kubelet]:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    handler = grpc.method_handlers_generic_handler("v1.PodResourcesLister", {
        "List": grpc.unary_unary_rpc_method_handler(
            kubelet.list, request_deserializer=WIRE["ListPodResourcesRequest"].FromString,
            response_serializer=WIRE["ListPodResourcesResponse"].SerializeToString),
    })
    server.add_generic_rpc_handlers((handler,))
    server.add_insecure_port(f"unix:{kubelet.socket}")
    server.start()
    try:
        yield kubelet
    finally:
        kubelet.stopped.set()
        server.stop(grace=None).wait(5)
        kubelet.socket.unlink(missing_ok=True)
