"""Shared parts of the gang tests: NVLink clusters, gang members, admission as the API server drives it,
and the fake API server extended with the GangLedger object, pod patch preconditions and Events."""

from __future__ import annotations

import copy
import io
import json
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import jsonpatch
import pytest
from kube_fake_apiserver import FakeApiServer, Request
from kubernetes import client as k8s_client
from patience import WAIT_SECONDS

from policies.vocabulary.accelerator_types import AcceleratorTable
from webhook.admission.request import decode_review
from webhook.assembly import build_runtime
from webhook.cluster.kube_json import KubeJson
from webhook.cluster.kube_source import KubeClusterSource
from webhook.cluster.model import ClusterStore
from webhook.config import Config
from webhook.gangs.controller import GangController, kube_native_writer, kube_pod_writer
from webhook.gangs.ledger import KubeGangStore
from webhook.gangs.native import GROUP_VERSION as WORKLOAD_API
from webhook.runtime import Runtime
from webhook.wing_config import Gangs

GB200 = "nvidia-gb200-186gb"
H100 = "nvidia-h100-80gb"
LEDGER_PATH = "/apis/kgwe.io/v1alpha1/gangledgers"


def gb200_node(name: str, clique: str, gpus: int = 4) -> dict[str, Any]:
    """A GB200 compute tray in multi-node NVLink clique `clique` (as the agent and GFD label it)."""
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {
            "kubernetes.io/hostname": name,
            "nvidia.com/gpu.present": "true",
            "nvidia.com/gpu.product": "NVIDIA-GB200",
            "nvidia.com/gpu.count": str(gpus),
            "nvidia.com/gpu.clique": clique,
            "kgwe.io/accelerator-type": GB200,
            "kgwe.io/nvlink-domain-size": str(gpus),
            "kgwe.io/nvlink-clique": clique,
        }},
        "spec": {"taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]},
        "status": {"allocatable": {"cpu": "140", "memory": "900Gi", "pods": "110", "nvidia.com/gpu": str(gpus)}},
    }


def h100_node(name: str, gpus: int = 8) -> dict[str, Any]:
    """A DGX H100: one node, one all-to-all NVLink domain of `gpus` GPUs, no multi-node clique."""
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {
            "kubernetes.io/hostname": name,
            "nvidia.com/gpu.present": "true",
            "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
            "nvidia.com/gpu.count": str(gpus),
            "kgwe.io/accelerator-type": H100,
            "kgwe.io/nvlink-domain-size": str(gpus),
        }},
        "status": {"allocatable": {"cpu": "220", "memory": "1990Gi", "pods": "110", "nvidia.com/gpu": str(gpus)}},
    }


def cliques(*sizes: int, prefix: str = "rack") -> list[dict[str, Any]]:
    """One clique per size, of `size` 4-GPU trays each: cliques(2, 4) is an 8-GPU and a 16-GPU clique."""
    nodes = []
    for index, trays in enumerate(sizes):
        clique = f"0c1e{index:04d}-0000-4000-8000-00000000000{index}.{index + 1}"
        nodes.extend(gb200_node(f"{prefix}{index}-tray{t}", clique) for t in range(trays))
    return nodes


def clique_of(nodes: list[dict[str, Any]], name: str) -> str:
    node = next(n for n in nodes if n["metadata"]["name"] == name)
    return str(node["metadata"]["labels"]["kgwe.io/nvlink-clique"])


def member(
    name: str,
    gang: str,
    size: int | str | None,
    *,
    gpus: int = 4,
    namespace: str = "ml",
    accelerator: str | None = GB200,
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A gang member as its creator writes it (before the webhooks)."""
    notes: dict[str, str] = {"kgwe.io/gang": gang}
    if size is not None:
        notes["kgwe.io/gang-size"] = str(size)
    if accelerator:
        notes["kgwe.io/accelerator"] = accelerator
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": dict(labels or {"app": gang}),
                     "annotations": notes},
        "spec": {"containers": [{"name": "worker", "image": "nvcr.io/nvidia/pytorch:24.05-py3",
                                 "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]},
    }


def review(pod: dict[str, Any], *, dry_run: bool = False, operation: str = "CREATE") -> dict[str, Any]:
    """An AdmissionReview as kube-apiserver posts it."""
    gvk = {"group": "", "version": "v1", "kind": "Pod"}
    gvr = {"group": "", "version": "v1", "resource": "pods"}
    return {
        "kind": "AdmissionReview",
        "apiVersion": "admission.k8s.io/v1",
        "request": {
            "uid": str(uuid.uuid4()), "kind": gvk, "resource": gvr, "requestKind": gvk, "requestResource": gvr,
            "name": pod["metadata"]["name"], "namespace": pod["metadata"]["namespace"], "operation": operation,
            "userInfo": {"username": "alice@example.com", "groups": ["system:authenticated"]},
            "object": copy.deepcopy(pod), "oldObject": None, "dryRun": dry_run,
            "options": {"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1"},
        },
    }


def make_store(*objects: dict[str, Any]) -> ClusterStore:
    store = ClusterStore(AcceleratorTable.build(), min_rebuild_interval=0)
    for obj in objects:
        store.upsert(copy.deepcopy(obj))
    store.mark_loaded()
    return store


def make_runtime(store: ClusterStore, config: Config | None = None) -> Runtime:
    return build_runtime(config or Config(), None, store=store, load_policies=False)


class Admitted:
    """The outcome of one pod CREATE through both webhooks."""

    def __init__(self, pod: dict[str, Any], allowed: bool, message: str, warnings: list[str]) -> None:
        self.pod = pod
        self.allowed = allowed
        self.message = message
        self.warnings = warnings


def admit(runtime: Runtime, pod: dict[str, Any], *, dry_run: bool = False) -> Admitted:
    """Mutate, apply the patch, then validate the mutated pod: what the API server does at CREATE."""
    mutated = runtime.admission.mutate(decode_review(review(pod, dry_run=dry_run)))
    obj = jsonpatch.apply_patch(copy.deepcopy(pod), mutated.patch) if mutated.patch else copy.deepcopy(pod)
    verdict = runtime.admission.validate(decode_review(review(obj, dry_run=dry_run)))
    message = verdict.message if not verdict.allowed else ""
    return Admitted(obj, verdict.allowed, message, list(mutated.warnings) + list(verdict.warnings))


def bind(pod: dict[str, Any], node: str) -> dict[str, Any]:
    """The scheduler's binding, as the pod object then reads."""
    bound = copy.deepcopy(pod)
    bound["spec"]["nodeName"] = node
    bound.setdefault("status", {})["phase"] = "Running"
    return bound


class GangApiServer(FakeApiServer):
    """The fake API server plus what gangs use: the cluster-scoped GangLedger (get, create, replace with a
    resourceVersion precondition), the resourceVersion precondition of pod merge patches, and Events."""

    def __init__(self, *, workload_api: bool = False, topology_aware: bool = False) -> None:
        super().__init__(workload_api=workload_api, topology_aware=topology_aware)
        self.ledger: dict[str, Any] | None = None
        self.events: list[dict[str, Any]] = []
        self.clock_offset = 0.0  # seconds the API server's clock is ahead (creationTimestamps have 1s resolution)
        self.httpd.RequestHandlerClass = _gang_handler(self, self.httpd.RequestHandlerClass)

    def put(self, kind: str, obj: dict[str, Any]) -> dict[str, Any]:
        """As the base, and a pod's `creationTimestamp` is set when it is first stored (the API server's clock)."""
        if kind == "Pod" and not obj.get("metadata", {}).get("creationTimestamp"):
            obj = copy.deepcopy(obj)
            created = datetime.fromtimestamp(time.time() + self.clock_offset, UTC)
            obj.setdefault("metadata", {})["creationTimestamp"] = created.strftime("%Y-%m-%dT%H:%M:%SZ")
        return super().put(kind, obj)

    def ledger_records(self) -> list[dict[str, Any]]:
        with self.cond:
            return copy.deepcopy(((self.ledger or {}).get("spec") or {}).get("gangs") or [])

    def pod(self, key: str) -> dict[str, Any]:
        return self.objects("Pod")[key]

    def wait_for(self, check: Callable[[], bool], timeout: float = WAIT_SECONDS) -> None:
        deadline = time.monotonic() + timeout
        while not check():
            if time.monotonic() > deadline:
                raise AssertionError("condition not reached")
            time.sleep(0.02)


def _gang_handler(server: GangApiServer, base: Any) -> Any:
    class Handler(base):  # type: ignore[misc, valid-type]
        def _json_body(self) -> Any:
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length)) if length else None
            with server.cond:
                server.requests.append(Request(self.command, self.path.split("?")[0], {}, body))
            return body

        def _injected(self) -> bool:
            """A failure the test queued with fail_next for this path: answered, and True."""
            with server.cond:
                queued = server.failures.get(self.path.split("?")[0])
                failure = queued.pop(0) if queued else None
            if failure is None:
                return False
            self._json_body()
            self._status(failure, "InternalError", f"injected failure {failure}")
            return True

        def do_GET(self) -> None:
            if self.path.split("?")[0] == f"{LEDGER_PATH}/kgwe-gangs":
                if self._injected():
                    return None
                with server.cond:
                    server.requests.append(Request("GET", self.path.split("?")[0], {}, None))
                    ledger = copy.deepcopy(server.ledger)
                if ledger is None:
                    return self._status(404, "NotFound", 'gangledgers.kgwe.io "kgwe-gangs" not found')
                return self._send_json(200, ledger)
            return super().do_GET()

        def do_POST(self) -> None:
            path = self.path.split("?")[0]
            if path == LEDGER_PATH:
                if self._injected():
                    return None
                body = self._json_body()
                with server.cond:
                    if server.ledger is not None:
                        return self._status(409, "AlreadyExists", 'gangledgers.kgwe.io "kgwe-gangs" already exists')
                    body["metadata"]["resourceVersion"] = str(server._next_version())
                    server.ledger = body
                return self._send_json(201, body)
            if path.startswith("/api/v1/namespaces/") and path.endswith("/events"):
                body = self._json_body()
                with server.cond:
                    server.events.append(body)
                return self._send_json(201, body)
            return super().do_POST()

        def do_PUT(self) -> None:
            if self.path.split("?")[0] == f"{LEDGER_PATH}/kgwe-gangs":
                if self._injected():
                    return None
                body = self._json_body()
                with server.cond:
                    if server.ledger is None:
                        return self._status(404, "NotFound", "kgwe-gangs")
                    if body["metadata"].get("resourceVersion") != server.ledger["metadata"]["resourceVersion"]:
                        return self._status(409, "Conflict", "the object has been modified; please apply your "
                                                             "changes to the latest version and try again")
                    body["metadata"]["resourceVersion"] = str(server._next_version())
                    server.ledger = body
                return self._send_json(200, body)
            return super().do_PUT()

        def do_PATCH(self) -> None:
            segments = self.path.split("?")[0].strip("/").split("/")
            if len(segments) == 6 and segments[4] == "pods":
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                body = json.loads(raw) if raw else {}
                wanted = (body.get("metadata") or {}).get("resourceVersion")
                current = server.objects("Pod").get(f"{segments[3]}/{segments[5]}")
                if wanted and current is not None and current["metadata"]["resourceVersion"] != wanted:
                    return self._status(409, "Conflict", "the object has been modified")
                gates_before = {g["name"] for g in (current or {}).get("spec", {}).get("schedulingGates") or []}
                gates_after = (body.get("spec") or {}).get("schedulingGates")
                if gates_after and {g["name"] for g in gates_after} - gates_before:
                    return self._status(422, "Invalid", "spec.schedulingGates: only deletion is allowed")
                # KEP-3838: while a pod is gated its nodeSelector may only gain keys, never change a value.
                selector_before = (current or {}).get("spec", {}).get("nodeSelector") or {}
                selector_after = (body.get("spec") or {}).get("nodeSelector") or {}
                if gates_before and any(k in selector_before and selector_before[k] != v
                                        for k, v in selector_after.items()):
                    return self._status(422, "Invalid", "spec.nodeSelector: only additions are allowed while gated")
                # Hand the body on to the base handler, which reads it again; the connection's own
                # stream comes back afterwards for the next request on this keep-alive connection.
                connection_stream = self.rfile
                self.rfile = io.BufferedReader(io.BytesIO(raw))  # type: ignore[assignment]
                try:
                    return super().do_PATCH()
                finally:
                    self.rfile = connection_stream
            return super().do_PATCH()

    return Handler


@pytest.fixture
def gang_apiserver() -> Iterator[GangApiServer]:
    server = GangApiServer().start()
    yield server
    server.close()


# -- one webhook replica over the fake API server, as `kgwe serve` runs in a cluster ----------------------
@dataclass
class Clock:
    offset: float = 0.0

    def __call__(self) -> float:
        return time.time() + self.offset


@dataclass
class Cluster:
    """One webhook replica (runtime and controller) over the fake API server."""

    server: GangApiServer
    api: k8s_client.ApiClient
    store: ClusterStore
    runtime: Runtime
    clock: Clock = field(default_factory=Clock)
    config: Config = field(default_factory=lambda: Config(gangs=Gangs(waitWarningSeconds=120, timeoutSeconds=600)))

    def controller(self, *, writer: bool = True) -> GangController:
        return GangController(
            self.store, KubeGangStore(KubeJson(self.api)), self.config,
            kube_pod_writer(self.api) if writer else None, clock=self.clock,
            native=kube_native_writer(self.api) if writer else None,
        )

    def create(self, pod: dict[str, Any]) -> dict[str, Any]:
        """A pod CREATE through the webhooks, then stored by the API server; the model catches up."""
        result = admit(self.runtime, pod)
        assert result.allowed, result.message
        stored = self.server.put("Pod", result.pod)
        self.sync()
        return stored

    def schedule(self, key: str, node: str) -> None:
        """kube-scheduler's binding: never of a gated pod, nor of one whose PodGroup does not exist (its
        GangScheduling plugin keeps such a pod waiting, KEP-5832)."""
        pod = self.server.pod(key)
        assert "schedulingGates" not in pod["spec"], f"{key} is still gated"
        group = (pod["spec"].get("schedulingGroup") or {}).get("podGroupName")
        if group and self.server.workload_api:
            assert f"{pod['metadata']['namespace']}/{group}" in self.server.objects("PodGroup"), f"{key}: no {group}"
        self.server.put("Pod", bind(pod, node))
        self.sync()

    def delete(self, key: str) -> None:
        self.server.delete("Pod", key)
        self.sync()

    def terminate(self, key: str) -> None:
        """A graceful delete of a pod that runs: the API server sets `deletionTimestamp` and keeps the pod until
        its kubelet confirms it stopped (up to the grace period)."""
        pod = self.server.pod(key)
        pod["metadata"]["deletionTimestamp"] = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        pod["metadata"]["deletionGracePeriodSeconds"] = 30
        self.server.put("Pod", pod)
        self.sync()

    def finish(self, key: str, phase: str = "Succeeded") -> None:
        """The pod's containers ended (`Succeeded` or `Failed`); a Job controller keeps such pods."""
        pod = self.server.pod(key)
        pod.setdefault("status", {})["phase"] = phase
        self.server.put("Pod", pod)
        self.sync()

    def sync(self) -> None:
        """Wait until the model shows every pod as the API server has it."""
        wanted = {k: p["metadata"]["resourceVersion"] for k, p in self.server.objects("Pod").items()}

        def caught_up() -> bool:
            pods = self.store.snapshot(force=True).pods
            return {k: p["metadata"]["resourceVersion"] for k, p in pods.items()} == wanted

        self.server.wait_for(caught_up)

    def gated(self) -> set[str]:
        return {k for k, p in self.server.objects("Pod").items() if p["spec"].get("schedulingGates")}


def replica(server: GangApiServer, api: k8s_client.ApiClient, config: Config | None = None) -> Cluster:
    """A replica as `kgwe serve` runs one: the model from list + watch and API discovery of the Workload API."""
    store = ClusterStore(AcceleratorTable.build(), min_rebuild_interval=0)
    source = KubeClusterSource(store, api, kinds=("Node", "Pod", "Namespace"), discover=(WORKLOAD_API,))
    source.start()
    assert source.wait_loaded(WAIT_SECONDS)
    _sources.append(source)
    if config is None:
        return Cluster(server, api, store, make_runtime(store))
    return Cluster(server, api, store, make_runtime(store, config), config=config)


_sources: list[KubeClusterSource] = []


@pytest.fixture
def api(gang_apiserver: GangApiServer) -> Iterator[k8s_client.ApiClient]:
    configuration = k8s_client.Configuration()
    configuration.host = gang_apiserver.url
    with k8s_client.ApiClient(configuration) as client:
        yield client
    while _sources:
        _sources.pop().stop()


def with_nodes(server: GangApiServer, nodes: list[dict[str, Any]]) -> None:
    for node in nodes:
        server.put("Node", node)
