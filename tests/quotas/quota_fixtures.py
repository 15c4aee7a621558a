"""Helpers for the quota tests: example objects, pod charges, a TenantQuota HTTP endpoint, a real cluster."""

from __future__ import annotations

import copy
import json
import threading
import time
import uuid
from decimal import Decimal
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client, config

from policies.kube_client import deadline_api_client
from policies.quota.file_store import FileQuotaStore
from policies.quota.kube_store import GROUP, PLURAL, VERSION, KubeQuotaStore
from policies.quota.mapped_store import MappedQuotaStore
from policies.quota.model import PodCharge
from policies.quota.store import InMemoryQuotaStore

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "cluster"
PREFIX = f"/apis/{GROUP}/{VERSION}/{PLURAL}/"


def load_objects(*names: str) -> list[dict[str, Any]]:
    objects: list[dict[str, Any]] = []
    for name in names:
        objects += [d for d in yaml.safe_load_all((EXAMPLES / name).read_text()) if d]
    return objects


def charge(
    namespace: str,
    name: str,
    gpus: str | int | Decimal,
    *types: str,
    bound: str | None = None,
    profile: str | None = None,
    tenant: str | None = None,
    memory_gi: int | None = None,
    uid: str | None = None,
    labels: dict[str, str] | None = None,
) -> PodCharge:
    return PodCharge(
        namespace=namespace,
        name=name,
        uid=uid,
        candidate_types=tuple(types),
        bound_type=bound,
        profile=profile,
        gpu_equivalents=Decimal(str(gpus)),
        gpu_memory_bytes=Decimal(memory_gi) * 1024**3 if memory_gi is not None else None,
        tenant=tenant,
        namespace_labels=labels or {},
    )


class TenantQuotaEndpoint:
    """TenantQuota objects served over HTTP with the API server's optimistic concurrency on `status`."""

    def __init__(self) -> None:
        self.objects: dict[str, dict[str, Any]] = {}
        self.requests: list[tuple[str, str]] = []
        self.lock = threading.Lock()
        self._version = 1
        self.delay_seconds = 0.0
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _reply(self, code: int, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                try:
                    self.send_response(code)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up at its deadline

            def _status(self, code: int, reason: str, message: str) -> None:
                self._reply(code, {"kind": "Status", "apiVersion": "v1", "status": "Failure",
                                   "reason": reason, "message": message, "code": code})

            def _target(self) -> str | None:
                path = self.path.split("?", 1)[0]
                if not path.startswith(PREFIX) or not path.endswith("/status"):
                    return None
                return path[len(PREFIX):-len("/status")]

            def do_GET(self) -> None:
                endpoint.requests.append(("GET", self.path))
                time.sleep(endpoint.delay_seconds)
                name = self._target()
                with endpoint.lock:
                    obj = copy.deepcopy(endpoint.objects.get(name or ""))
                if obj is None:
                    self._status(404, "NotFound", f"tenantquotas.kgwe.io {name!r} not found")
                else:
                    self._reply(200, obj)

            def do_PUT(self) -> None:
                endpoint.requests.append(("PUT", self.path))
                name = self._target() or ""
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with endpoint.lock:
                    current = endpoint.objects.get(name)
                    if current is None:
                        self._status(404, "NotFound", f"tenantquotas.kgwe.io {name!r} not found")
                        return
                    if body["metadata"].get("resourceVersion") != current["metadata"]["resourceVersion"]:
                        self._status(409, "Conflict", "the object has been modified; please apply your changes "
                                                      "to the latest version and try again")
                        return
                    # Like the status subresource: only `status` changes, whatever else the body says.
                    current["status"] = body.get("status") or {}
                    endpoint._version += 1
                    current["metadata"]["resourceVersion"] = str(endpoint._version)
                    answer = copy.deepcopy(current)
                self._reply(200, answer)

        ThreadingHTTPServer.request_queue_size = 256  # many admissions connect at once
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def add(self, quota: dict[str, Any]) -> None:
        obj = copy.deepcopy(quota)
        with self.lock:
            self._version += 1
            obj.setdefault("metadata", {})["resourceVersion"] = str(self._version)
            self.objects[obj["metadata"]["name"]] = obj

    def api(self) -> client.CustomObjectsApi:
        return client.CustomObjectsApi(deadline_api_client(client.Configuration(host=self.url)))

    def new_store(self) -> KubeQuotaStore:
        return KubeQuotaStore(self.api())


MINIMAL_CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": f"{PLURAL}.{GROUP}"},
    "spec": {
        "group": GROUP,
        "scope": "Cluster",
        "names": {"plural": PLURAL, "singular": "tenantquota", "kind": "TenantQuota", "listKind": "TenantQuotaList"},
        "versions": [
            {
                "name": VERSION,
                "served": True,
                "storage": True,
                "subresources": {"status": {}},
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                            "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                        },
                    }
                },
            }
        ],
    },
}


def _chart_crd() -> dict[str, Any] | None:
    crd_dir = ROOT / "charts" / "kgwe" / "crds"
    for path in sorted(crd_dir.glob("*.y*ml")) if crd_dir.is_dir() else []:
        for doc in yaml.safe_load_all(path.read_text()):
            if isinstance(doc, dict) and doc.get("kind") == "CustomResourceDefinition" and (
                (doc.get("spec") or {}).get("names", {}).get("plural") == PLURAL
            ):
                return doc
    return None


class RealCluster:
    """A TenantQuota CRD and objects on the API server named by KGWE_TEST_KUBECONFIG, removed afterwards."""

    def __init__(self, kubeconfig: str) -> None:
        self.api_client = config.new_client_from_config(config_file=kubeconfig)
        self.extensions = client.ApiextensionsV1Api(self.api_client)
        self.created_crd = False
        self.names: list[str] = []
        self.kubeconfig = kubeconfig

    def ensure_crd(self) -> None:
        crd_name = f"{PLURAL}.{GROUP}"
        try:
            self.extensions.read_custom_resource_definition(crd_name)
        except client.exceptions.ApiException as exc:
            if exc.status != 404:
                raise
            crd = client.V1CustomResourceDefinition.from_dict(_chart_crd() or MINIMAL_CRD)
            assert crd is not None
            self.extensions.create_custom_resource_definition(crd)
            self.created_crd = True
        for _ in range(100):
            crd = self.extensions.read_custom_resource_definition(crd_name)
            conditions = (crd.status.conditions if crd.status else None) or []
            if any(c.type == "Established" and c.status == "True" for c in conditions):
                return
            time.sleep(0.1)
        raise RuntimeError(f"CRD {crd_name} did not become Established")

    def api(self) -> client.CustomObjectsApi:
        # One client per simulated replica, as separate webhook pods would have.
        configuration = client.Configuration()
        config.load_kube_config(config_file=self.kubeconfig, client_configuration=configuration)
        return client.CustomObjectsApi(deadline_api_client(configuration))

    def new_store(self) -> KubeQuotaStore:
        return KubeQuotaStore(self.api())

    def add(self, quota: dict[str, Any]) -> None:
        body = copy.deepcopy(quota)
        body.pop("status", None)
        client.CustomObjectsApi(self.api_client).create_cluster_custom_object(GROUP, VERSION, PLURAL, body)
        self.names.append(body["metadata"]["name"])

    def cleanup(self) -> None:
        custom = client.CustomObjectsApi(self.api_client)
        for name in self.names:
            try:
                custom.delete_cluster_custom_object(GROUP, VERSION, PLURAL, name)
            except client.exceptions.ApiException as exc:
                if exc.status != 404:
                    raise
        if self.created_crd:
            self.extensions.delete_custom_resource_definition(f"{PLURAL}.{GROUP}")


class InMemoryBackend:
    """The in-memory store behind the same interface as the two API-server backends."""

    def __init__(self) -> None:
        self.store = InMemoryQuotaStore()

    def add(self, quota: dict[str, Any]) -> None:
        pass  # the in-memory store keeps a status for any name

    def new_store(self) -> InMemoryQuotaStore:
        return self.store  # replicas in one process share it


class FileBackend:
    """The file store shared by `kgwe serve` workers: every replica opens the file on its own."""

    def __init__(self, directory: Path) -> None:
        self.path = directory / "quota-state.json"

    def add(self, quota: dict[str, Any]) -> None:
        pass  # a status appears on the first write

    def new_store(self) -> FileQuotaStore:
        return FileQuotaStore(self.path)


class MappedBackend(FileBackend):
    """The shared mapping `kgwe serve`'s workers use (one mapping per replica, as per worker process)."""

    def new_store(self) -> MappedQuotaStore:  # type: ignore[override]
        return MappedQuotaStore(self.path, slot_bytes=1024 * 1024)


def unique_name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"
