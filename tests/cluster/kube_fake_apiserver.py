"""A small fake Kubernetes API server on 127.0.0.1 for list/watch, patching pods, Leases, reading and replacing
ConfigMaps, and the TokenReviews and SubjectAccessReviews of delegated authentication and authorization.

Namespaced objects are deleted with DeleteOptions preconditions (uid, resourceVersion) checked; lists
take an equality `labelSelector`. Pod patches are refused as the real API server refuses them: a stale
resourceVersion (409 Conflict), and the pod update rules of gated pods (`pod_update_problem`: 422
Invalid). The status subresources of pods (strategic merge of conditions by type) and of cluster-scoped
KGWE objects (TenantQuota) take patches too.

Enough of the real protocol for a reflector: paged lists with a collection resourceVersion, watches as
chunked streams of JSON lines from a resourceVersion (with bookmarks on request), 410 Gone for a
resourceVersion older than the kept history (as an ERROR event or as the HTTP status), and knobs a test
turns: fail the next N requests of a path, drop open watch streams mid-line, forget history, hide a CRD.

`FakeApiServer(workload_api=True)` serves the Workload API of Kubernetes 1.36 (`scheduling.k8s.io/v1alpha2`
workloads and podgroups: the GenericWorkload gate on), with `topology_aware=True` keeping the PodGroup topology
constraints (TopologyAwareWorkloadScheduling on); without it the group is not served and a pod's
`spec.schedulingGroup` is dropped at create, as the real server does (fake_workload_api.py).
"""

from __future__ import annotations

import bisect
import copy
import json
import select
import socket
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import fake_workload_api
import orjson
import pytest
import yaml
from kubernetes import client as k8s_client

RBAC = "/apis/rbac.authorization.k8s.io/v1"
KGWE = "/apis/kgwe.io/v1alpha1"
DRA = "/apis/resource.k8s.io/v1"
NVIDIA = "/apis/resource.nvidia.com/v1beta1"
ADMISSION = "/apis/admissionregistration.k8s.io/v1"
RESOURCES: dict[str, tuple[str, str, bool]] = {
    # path -> (kind, apiVersion, namespaced)
    "/api/v1/nodes": ("Node", "v1", False),
    "/api/v1/pods": ("Pod", "v1", True),
    "/api/v1/namespaces": ("Namespace", "v1", False),
    # What KGWE writes in others' namespaces: the MIG manager's ConfigMap (webhook/migplan/apply.py).
    "/api/v1/configmaps": ("ConfigMap", "v1", True),
    f"{RBAC}/roles": ("Role", "rbac.authorization.k8s.io/v1", True),
    f"{RBAC}/clusterroles": ("ClusterRole", "rbac.authorization.k8s.io/v1", False),
    f"{RBAC}/rolebindings": ("RoleBinding", "rbac.authorization.k8s.io/v1", True),
    f"{RBAC}/clusterrolebindings": ("ClusterRoleBinding", "rbac.authorization.k8s.io/v1", False),
    f"{KGWE}/hardwareprofiles": ("HardwareProfile", "kgwe.io/v1alpha1", False),
    f"{KGWE}/tenantquotas": ("TenantQuota", "kgwe.io/v1alpha1", False),
    f"{KGWE}/gpupolicies": ("GPUPolicy", "kgwe.io/v1alpha1", False),
    f"{KGWE}/migstrategies": ("MIGStrategy", "kgwe.io/v1alpha1", False),
    f"{DRA}/resourceslices": ("ResourceSlice", "resource.k8s.io/v1", False),
    f"{DRA}/deviceclasses": ("DeviceClass", "resource.k8s.io/v1", False),
    f"{DRA}/resourceclaims": ("ResourceClaim", "resource.k8s.io/v1", True),
    f"{DRA}/resourceclaimtemplates": ("ResourceClaimTemplate", "resource.k8s.io/v1", True),
    # NVIDIA's DRA driver CRD: the ComputeDomains KGWE creates for gangs on multi-node NVLink.
    f"{NVIDIA}/computedomains": ("ComputeDomain", "resource.nvidia.com/v1beta1", True),
    # Two workload kinds (webhook/cluster/workloads.py); the others are "not installed" here.
    "/apis/apps/v1/deployments": ("Deployment", "apps/v1", True),
    "/apis/batch/v1/jobs": ("Job", "batch/v1", True),
    # What KGWE writes from CEL GPUPolicies (policies.generateAdmissionPolicies, webhook/vap/).
    f"{ADMISSION}/validatingadmissionpolicies": ("ValidatingAdmissionPolicy", "admissionregistration.k8s.io/v1", False),
    f"{ADMISSION}/validatingadmissionpolicybindings": (
        "ValidatingAdmissionPolicyBinding", "admissionregistration.k8s.io/v1", False),
}
PATH_OF_KIND = {kind: path for path, (kind, _v, _n) in [*RESOURCES.items(), *fake_workload_api.RESOURCES.items()]}
LEASES = "/apis/coordination.k8s.io/v1/namespaces/"
TOKEN_REVIEWS = "/apis/authentication.k8s.io/v1/tokenreviews"
ACCESS_REVIEWS = "/apis/authorization.k8s.io/v1/subjectaccessreviews"


def key_of(obj: dict[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta['namespace']}/{meta['name']}" if meta.get("namespace") else str(meta["name"])


@dataclass
class Collection:
    kind: str
    api_version: str
    # Stored objects are never changed in place (a change stores a new dict), so lists, pages and events
    # share them without copies, and each one's list-item JSON is encoded once (`encoded`, by key, with the
    # object it was encoded from): a list of 150,000 pods is then a join of cached bytes.
    objects: dict[str, dict[str, Any]] = field(default_factory=dict)
    events: list[tuple[int, str, dict[str, Any]]] = field(default_factory=list)
    oldest_watchable: int = 0  # watches from an older resourceVersion get 410 Gone
    encoded: dict[str, tuple[dict[str, Any], bytes]] = field(default_factory=dict)

    def list_item(self, key: str, obj: dict[str, Any]) -> bytes:
        cached = self.encoded.get(key)
        if cached is not None and cached[0] is obj:
            return cached[1]
        item = obj
        # Like the real server: list items of built-in kinds carry no kind/apiVersion.
        if not self.api_version.startswith("kgwe.io/"):
            item = {k: v for k, v in obj.items() if k not in ("kind", "apiVersion")}
        data = orjson.dumps(item)
        self.encoded[key] = (obj, data)
        return data


@dataclass(frozen=True)
class Grant:
    """One allowed (subject, verb, resource or non-resource URL) as RBAC would grant it; `namespace` None is
    cluster-wide (a ClusterRoleBinding), a name is that namespace only (a RoleBinding)."""

    subject: str  # a username or a group name
    verb: str
    resource: str = ""  # "pods", "nodes"; empty for a non-resource URL
    group: str = ""
    namespace: str | None = None
    url: str = ""  # a non-resource URL such as /metrics


@dataclass
class Request:
    method: str
    path: str
    query: dict[str, str]
    body: Any = None
    authorization: str | None = None
    at: float = field(default_factory=time.monotonic)  # when it arrived (benchmarks time start-up by it)


class _QuietServer(ThreadingHTTPServer):
    """A client that went away before its answer (a watch closed, a request given up at its deadline) is no
    error of the server, as for the API server: the socket server would print a traceback into whichever
    test's captured output runs when a late answer finds the connection gone."""

    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError, ConnectionAbortedError)):
            return
        super().handle_error(request, client_address)


class FakeApiServer:
    def __init__(self, *, workload_api: bool = False, topology_aware: bool = False) -> None:
        """`workload_api`: the GenericWorkload gate (and the scheduling.k8s.io/v1alpha2 API) on;
        `topology_aware`: TopologyAwareWorkloadScheduling on as well."""
        self.cond = threading.Condition()
        self.resource_version = 1000
        self.workload_api = workload_api
        self.topology_aware = topology_aware and workload_api
        served = {**RESOURCES, **(fake_workload_api.RESOURCES if workload_api else {})}
        self.collections = {path: Collection(kind, version) for path, (kind, version, _n) in served.items()}
        self.requests: list[Request] = []
        self.failures: dict[str, list[int]] = {}
        self.missing: set[str] = set()
        # Served beside the collections (discovery lists them): KGWE's gang ledger, which tests/gangs serves.
        self.extra_resources: set[str] = {f"{KGWE}/gangledgers"}
        # (group, resource, subresource, verb) a SelfSubjectAccessReview answers "not allowed" for.
        self.denied: set[tuple[str, str, str, str]] = set()
        self.expired_as_http_status = False
        self.expire_next_continue = False  # the next paged-list continue token is answered 410
        self.leases: dict[str, dict[str, Any]] = {}
        self.posted_events: list[dict[str, Any]] = []  # core/v1 Events created in any namespace
        self.tokens: dict[str, dict[str, Any]] = {}  # bearer token -> the userInfo a TokenReview answers
        self.grants: list[Grant] = []  # what SubjectAccessReviews allow
        self.delays: dict[str, float] = {}  # path -> seconds to wait before answering a POST to it
        self._drop_generation = 0
        self._closing = False
        # continue token -> (the list's resourceVersion, its (key, object) snapshot, where the next page starts)
        self._pages: dict[str, tuple[int, list[tuple[str, dict[str, Any]]], int]] = {}
        self._open: dict[str, int] = {}
        self.httpd = _QuietServer(("127.0.0.1", 0), _handler(self))
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(
            target=self.httpd.serve_forever, args=(0.05,), name="fake-apiserver", daemon=True
        )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def start(self) -> FakeApiServer:
        self.thread.start()
        return self

    def close(self) -> None:
        with self.cond:
            self._closing = True
            self.cond.notify_all()
        self.httpd.shutdown()
        self.httpd.server_close()

    # -- state a test changes -------------------------------------------------------------------
    def _next_version(self) -> int:
        self.resource_version += 1
        return self.resource_version

    def put(self, kind: str, obj: dict[str, Any]) -> dict[str, Any]:
        """Create or replace an object (ADDED or MODIFIED event); returns it with its new resourceVersion."""
        collection = self.collections[PATH_OF_KIND[kind]]
        if kind == "Pod" and key_of(obj) not in collection.objects:
            obj = fake_workload_api.pod_create(obj, served=self.workload_api)
        with self.cond:
            stored = copy.deepcopy(obj)
            stored.setdefault("metadata", {})
            stored["kind"], stored["apiVersion"] = collection.kind, collection.api_version
            version = self._next_version()
            stored["metadata"]["resourceVersion"] = str(version)
            key = key_of(stored)
            stored["metadata"].setdefault("uid", f"uid-{kind}-{key}")
            event = "MODIFIED" if key in collection.objects else "ADDED"
            collection.objects[key] = stored
            collection.events.append((version, event, stored))
            self.cond.notify_all()
            return copy.deepcopy(stored)

    def load(self, kind: str, objects: list[dict[str, Any]]) -> int:
        """Store many objects at once, as if their creation had been compacted away: no events, and a watch
        from a resourceVersion before the load gets 410 Gone (a reflector then lists). The server keeps the
        dicts themselves (no copy): the caller must not change them afterwards. Returns the resourceVersion."""
        collection = self.collections[PATH_OF_KIND[kind]]
        with self.cond:
            for obj in objects:
                if kind == "Pod":
                    obj = fake_workload_api.pod_create(obj, served=self.workload_api)
                meta = obj.setdefault("metadata", {})
                obj["kind"], obj["apiVersion"] = collection.kind, collection.api_version
                meta["resourceVersion"] = str(self._next_version())
                key = key_of(obj)
                meta.setdefault("uid", f"uid-{kind}-{key}")
                collection.objects[key] = obj
            collection.oldest_watchable = self.resource_version  # a watch from the load's version is whole
            collection.events.clear()
            self.cond.notify_all()
            return self.resource_version

    def get(self, kind: str, key: str) -> dict[str, Any] | None:
        """A copy of one stored object, or None."""
        with self.cond:
            found = self.collections[PATH_OF_KIND[kind]].objects.get(key)
            return copy.deepcopy(found) if found is not None else None

    def delete(self, kind: str, key: str) -> None:
        collection = self.collections[PATH_OF_KIND[kind]]
        with self.cond:
            gone = collection.objects.pop(key)
            collection.encoded.pop(key, None)
            version = self._next_version()
            obj = {**gone, "metadata": {**gone["metadata"], "resourceVersion": str(version)}}
            collection.events.append((version, "DELETED", obj))
            self.cond.notify_all()

    def bookmark(self, kind: str) -> int:
        """Advance the resourceVersion with a change elsewhere and tell watchers of `kind` by a BOOKMARK."""
        collection = self.collections[PATH_OF_KIND[kind]]
        with self.cond:
            version = self._next_version()
            marker = {"kind": collection.kind, "apiVersion": collection.api_version,
                      "metadata": {"resourceVersion": str(version)}}
            collection.events.append((version, "BOOKMARK", marker))
            self.cond.notify_all()
            return version

    def forget_history(self, kind: str) -> None:
        """Compaction: a watch from any resourceVersion seen so far now gets 410 Gone."""
        collection = self.collections[PATH_OF_KIND[kind]]
        with self.cond:
            collection.oldest_watchable = self.resource_version + 1
            collection.events.clear()

    def drop_watches(self) -> None:
        """Break every open watch stream in the middle of an event line, without the closing chunk."""
        with self.cond:
            self._drop_generation += 1
            self.cond.notify_all()

    def fail_next(self, kind_or_path: str, status: int, times: int = 1) -> None:
        path = PATH_OF_KIND.get(kind_or_path, kind_or_path)
        with self.cond:
            self.failures.setdefault(path, []).extend([status] * times)

    def add_user(self, token: str, username: str, groups: list[str] | None = None) -> None:
        """A token TokenReview authenticates as `username` (with system:authenticated, as the API server adds)."""
        with self.cond:
            self.tokens[token] = {"username": username, "uid": f"uid-{username}",
                                  "groups": [*(groups or []), "system:authenticated"]}

    def allow(self, subject: str, verb: str, resource: str = "", *, group: str = "", namespace: str | None = None,
              url: str = "") -> None:
        with self.cond:
            self.grants.append(Grant(subject, verb, resource, group, namespace, url))

    def allowed(self, user: str, groups: list[str], attributes: dict[str, Any], non_resource: bool) -> bool:
        """RBAC's answer: some grant to the user or one of its groups covers the attributes."""
        subjects = {user, *groups}
        verb = str(attributes.get("verb") or "")
        with self.cond:
            grants = list(self.grants)
        for grant in grants:
            if grant.subject not in subjects or grant.verb not in (verb, "*"):
                continue
            if non_resource:
                if grant.url and grant.url == attributes.get("path"):
                    return True
                continue
            if grant.url or grant.resource != attributes.get("resource"):
                continue
            if grant.group != str(attributes.get("group") or ""):
                continue
            # A RoleBinding grants in its namespace only; a request for every namespace needs a cluster-wide grant.
            if grant.namespace is None or grant.namespace == (attributes.get("namespace") or None):
                return True
        return False

    def reviews(self, path: str) -> list[Request]:
        with self.cond:
            return [r for r in self.requests if r.path == path and r.method == "POST"]

    def objects(self, kind: str) -> dict[str, dict[str, Any]]:
        with self.cond:
            return copy.deepcopy(self.collections[PATH_OF_KIND[kind]].objects)

    def requests_to(self, kind: str, *, watch: bool | None = None) -> list[Request]:
        path = PATH_OF_KIND[kind]
        with self.cond:
            return [
                r for r in self.requests
                if r.path == path and (watch is None or (r.query.get("watch") == "true") == watch)
            ]

    def open_watches(self, kind: str) -> int:
        with self.cond:
            return self._open.get(PATH_OF_KIND[kind], 0)


def serving_cluster(directory: Path) -> FakeApiServer:
    """A started fake API server holding every object of a YAML cluster directory it knows the kind of."""
    from webhook.cluster.yaml_source import iter_manifests

    server = FakeApiServer().start()
    for _path, obj in iter_manifests(directory):
        if obj.get("kind") in PATH_OF_KIND:
            server.put(obj["kind"], obj)
    return server


def write_kubeconfig(path: Path, server_url: str, user: str = "kgwe") -> Path:
    """A kubeconfig at `path` whose one context points at `server_url` with a token nobody checks."""
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "fake",
        "clusters": [{"name": "fake", "cluster": {"server": server_url}}],
        "users": [{"name": user, "user": {"token": "not-checked"}}],
        "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": user}}],
    }))
    return path


def _handler(server: FakeApiServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        # As Go's net/http does: the status line and headers, then the body, in separate writes would otherwise
        # wait out the client's delayed ACK (40 ms) on every request of a keep-alive connection.
        disable_nagle_algorithm = True

        def log_message(self, format: str, *args: Any) -> None:
            return

        # -- plumbing ---------------------------------------------------------------------------
        def _send_json(self, status: int, body: dict[str, Any]) -> None:
            self._send_bytes(status, json.dumps(body).encode())

        def _send_bytes(self, status: int, data: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _status(self, code: int, reason: str, message: str) -> None:
            self._send_json(code, {"kind": "Status", "apiVersion": "v1", "status": "Failure",
                                   "message": message, "reason": reason, "code": code})

        def _read_body(self) -> Any:
            length = int(self.headers.get("Content-Length") or 0)
            return json.loads(self.rfile.read(length)) if length else None

        def _begin(self, method: str) -> tuple[str, dict[str, str], Any] | None:
            parts = urlsplit(self.path)
            query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
            body = self._read_body() if method in ("POST", "PUT", "PATCH", "DELETE") else None
            with server.cond:
                server.requests.append(Request(method, parts.path, query, body, self.headers.get("Authorization")))
                queued = server.failures.get(parts.path)
                failure = queued.pop(0) if queued else None
            if failure is not None:
                self._status(failure, "InternalError", f"injected failure {failure}")
                return None
            return parts.path, query, body

        # -- verbs --------------------------------------------------------------------------------
        def do_GET(self) -> None:
            begun = self._begin("GET")
            if begun is None:
                return
            path, query, _ = begun
            if path.startswith(LEASES):
                return self._get_lease(path)
            segments = path.strip("/").split("/")
            if len(segments) == 6 and segments[:3] == ["api", "v1", "namespaces"] and segments[4] in (
                    "pods", "configmaps"):
                # GET /api/v1/namespaces/{ns}/{pods,configmaps}/{name}: one whole object.
                found = server.collections[f"/api/v1/{segments[4]}"].objects.get(f"{segments[3]}/{segments[5]}")
                if found is None:
                    return self._status(404, "NotFound", f'{segments[4]} "{segments[5]}" not found')
                return self._send_json(200, found)
            if len(segments) == 4 and segments[:3] == ["api", "v1", "nodes"]:
                # GET /api/v1/nodes/{name}: one node (what kgwe agent reads before it patches).
                node = server.get("Node", segments[3])
                if node is None:
                    return self._status(404, "NotFound", f'nodes "{segments[3]}" not found')
                return self._send_json(200, node)
            if len(segments) == 7 and segments[0] == "apis" and segments[3] == "namespaces":
                # GET /apis/{group}/{version}/namespaces/{ns}/{resource}/{name}: one namespaced object.
                collection = server.collections.get("/" + "/".join([*segments[:3], segments[5]]))
                found = collection.objects.get(f"{segments[4]}/{segments[6]}") if collection is not None else None
                if found is None:
                    return self._status(404, "NotFound", f'{segments[5]} "{segments[6]}" not found')
                return self._send_json(200, found)
            if len(segments) == 3 and segments[0] == "apis":
                return self._discovery(path)
            if path not in server.collections or path in server.missing:
                return self._status(404, "NotFound", f"the server could not find the requested resource {path}")
            if query.get("watch") == "true":
                return self._watch(path, query)
            return self._list(path, query)

        def do_POST(self) -> None:
            begun = self._begin("POST")
            if begun is None:
                return
            if begun[0].startswith(LEASES):
                return self._create_lease(begun[0], begun[2])
            delay = server.delays.get(begun[0])
            if delay:
                time.sleep(delay)
            if begun[0] == "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews":
                return self._self_access_review(begun[2])
            if begun[0] == TOKEN_REVIEWS:
                return self._token_review(begun[2])
            if begun[0] == ACCESS_REVIEWS:
                return self._access_review(begun[2])
            if begun[0].startswith("/api/v1/namespaces/") and begun[0].endswith("/events"):
                with server.cond:
                    server.posted_events.append(begun[2])
                return self._send_json(201, begun[2])
            self._create(begun[0], begun[2])

        def _discovery(self, path: str) -> None:
            """GET /apis/{group}/{version}: the resources served there (a CRD in `missing` is not)."""
            served = [p for p in [*server.collections, *server.extra_resources]
                      if p.rsplit("/", 1)[0] == path and p not in server.missing]
            if not served:
                return self._status(404, "NotFound", f"the server could not find the requested resource {path}")
            resources: list[dict[str, Any]] = [{"name": p.rsplit("/", 1)[1]} for p in sorted(served)]
            if path == fake_workload_api.PREFIX:
                resources = copy.deepcopy(fake_workload_api.DISCOVERY)  # as kube-apiserver lists them
            self._send_json(200, {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": path[len("/apis/"):],
                                  "resources": resources})

        def _self_access_review(self, body: Any) -> None:
            """SelfSubjectAccessReview of KGWE's own account: allowed unless a test put it in `server.denied`."""
            attributes = ((body or {}).get("spec") or {}).get("resourceAttributes") or {}
            asked = (attributes.get("group") or "", attributes.get("resource") or "",
                     attributes.get("subresource") or "", attributes.get("verb") or "")
            allowed = asked not in server.denied
            self._send_json(201, {**(body or {}), "status": {"allowed": allowed}})

        # -- delegated authentication and authorization ---------------------------------------------
        def _token_review(self, body: Any) -> None:
            """TokenReview as the API server's registry answers it: 400 without a token, 201 with a status."""
            spec = body.get("spec") if isinstance(body, dict) else None
            if not isinstance(body, dict) or body.get("kind") != "TokenReview" or not isinstance(spec, dict):
                return self._status(400, "BadRequest", "the body of the request was in an unknown format")
            token = spec.get("token") or ""
            if not token:
                return self._status(400, "BadRequest", "token is required for TokenReview in authentication")
            with server.cond:
                user = copy.deepcopy(server.tokens.get(token))
            status: dict[str, Any] = {"authenticated": True, "user": user} if user else {
                "authenticated": False, "user": {}, "error": "invalid bearer token"}
            self._send_json(201, {"kind": "TokenReview", "apiVersion": "authentication.k8s.io/v1",
                                  "metadata": {}, "spec": spec, "status": status})

        def _access_review(self, body: Any) -> None:
            """SubjectAccessReview with the API server's validation (422 Invalid) and RBAC over `server.grants`."""
            spec = body.get("spec") if isinstance(body, dict) else None
            if not isinstance(body, dict) or body.get("kind") != "SubjectAccessReview" or not isinstance(spec, dict):
                return self._status(400, "BadRequest", "the body of the request was in an unknown format")
            resource = spec.get("resourceAttributes")
            non_resource = spec.get("nonResourceAttributes")
            if (resource is None) == (non_resource is None):
                return self._status(422, "Invalid", "SubjectAccessReview.authorization.k8s.io is invalid: "
                                    "spec.resourceAttributes: Invalid value: exactly one of nonResourceAttributes "
                                    "or resourceAttributes must be specified")
            user = str(spec.get("user") or "")
            groups = [str(g) for g in spec.get("groups") or []]
            if not user and not groups:
                return self._status(422, "Invalid", "SubjectAccessReview.authorization.k8s.io is invalid: "
                                    "spec.user: Invalid value: \"\": at least one of user or group must be specified")
            allowed = server.allowed(user, groups, resource if resource is not None else non_resource,
                                     non_resource is not None)
            status = {"allowed": allowed} if allowed else {"allowed": False, "reason": "no RBAC rule allows it"}
            self._send_json(201, {"kind": "SubjectAccessReview", "apiVersion": "authorization.k8s.io/v1",
                                  "metadata": {}, "spec": spec, "status": status})

        def _create(self, path: str, body: Any) -> None:
            """POST /apis/{group}/{version}/namespaces/{ns}/{resource} (or /apis/{group}/{version}/{resource},
            cluster-scoped): create, 409 if the name exists."""
            segments = path.strip("/").split("/")
            cluster_scoped = len(segments) == 4 and segments[0] == "apis"
            if not cluster_scoped and (len(segments) != 6 or segments[3] != "namespaces"):
                return self._status(404, "NotFound", path)
            collection_path = path if cluster_scoped else "/" + "/".join([*segments[:3], segments[5]])
            collection = server.collections.get(collection_path)
            if collection is None or collection_path in server.missing or not isinstance(body, dict):
                return self._status(404, "NotFound", f"the server could not find the requested resource {path}")
            meta = body.setdefault("metadata", {})
            if not cluster_scoped:
                if meta.get("namespace", segments[4]) != segments[4]:
                    return self._status(400, "BadRequest", "the namespace of the object does not match the URL")
                meta["namespace"] = segments[4]
            if key_of(body) in collection.objects:
                return self._status(409, "AlreadyExists", f'{segments[5]} "{meta.get("name")}" already exists')
            if collection_path in fake_workload_api.RESOURCES:
                prepared, problem = fake_workload_api.prepare_create(collection.kind, body,
                                                                     topology_aware=server.topology_aware)
                if prepared is None:
                    return self._status(422, "Invalid", problem)
                body = prepared
            self._send_json(201, server.put(collection.kind, body))

        def do_DELETE(self) -> None:
            """DELETE /apis/{group}/{version}/namespaces/{ns}/{resource}/{name}, with DeleteOptions
            `preconditions` (uid, resourceVersion) checked as the real server does: 409 Conflict on a
            mismatch, 404 when the object is gone; 200 with the object as it was."""
            begun = self._begin("DELETE")
            if begun is None:
                return
            path, _query, body = begun
            segments = path.strip("/").split("/")
            if len(segments) == 5 and segments[0] == "apis":  # cluster-scoped
                collection = server.collections.get("/" + "/".join(segments[:4]))
                key = segments[4]
                segments = [*segments[:3], "", "", segments[3], segments[4]]
            elif len(segments) == 7 and segments[0] == "apis" and segments[3] == "namespaces":
                collection = server.collections.get("/" + "/".join([*segments[:3], segments[5]]))
                key = f"{segments[4]}/{segments[6]}"
            else:
                return self._status(405, "MethodNotAllowed", path)
            with server.cond:
                current = collection.objects.get(key) if collection is not None else None
                if collection is None or current is None:
                    return self._status(404, "NotFound", f'{segments[5]} "{segments[6]}" not found')
                wanted = (body or {}).get("preconditions") or {}
                meta = current["metadata"]
                for field_name in ("uid", "resourceVersion"):
                    if wanted.get(field_name) is not None and wanted[field_name] != meta.get(field_name):
                        return self._status(
                            409, "Conflict", f"Operation cannot be fulfilled on {segments[5]} \"{segments[6]}\": "
                            f"Precondition failed: {field_name} in precondition: {wanted[field_name]}, "
                            f"{field_name} in object meta: {meta.get(field_name)}")
                gone = copy.deepcopy(current)
                server.delete(collection.kind, key)
            self._send_json(200, gone)

        def do_PUT(self) -> None:
            begun = self._begin("PUT")
            if begun is None:
                return
            if begun[0].startswith(LEASES):
                return self._replace_lease(begun[0], begun[2])
            self._replace(begun[0], begun[2])

        def _replace(self, path: str, body: Any) -> None:
            """PUT /apis/{group}/{version}/{resource}/{name} (cluster-scoped): replace; the body's
            resourceVersion must be the stored one (409 Conflict otherwise), 404 when absent."""
            segments = path.strip("/").split("/")
            if len(segments) == 6 and segments[:3] == ["api", "v1", "namespaces"] and segments[4] == "configmaps":
                return self._replace_configmap(segments[3], segments[5], body)
            collection = server.collections.get("/" + "/".join(segments[:4])) if len(segments) == 5 else None
            if collection is None or not isinstance(body, dict):
                return self._status(405, "MethodNotAllowed", path)
            with server.cond:
                current = collection.objects.get(segments[4])
                if current is None:
                    return self._status(404, "NotFound", f'{segments[3]} "{segments[4]}" not found')
                meta = body.setdefault("metadata", {})
                if meta.get("resourceVersion") != current["metadata"]["resourceVersion"]:
                    return self._status(409, "Conflict", f'Operation cannot be fulfilled on {segments[3]} '
                                        f'"{segments[4]}": the object has been modified')
                meta["uid"] = current["metadata"].get("uid")
                self._send_json(200, server.put(collection.kind, body))

        def _replace_configmap(self, namespace: str, name: str, body: Any) -> None:
            """PUT /api/v1/namespaces/{ns}/configmaps/{name}: as the API server replaces an object, a body with a
            resourceVersion other than the stored one is refused (409 Conflict: compare-and-swap), one without
            replaces whatever is stored; 404 when absent, 400 when the body names another object."""
            with server.cond:
                current = server.get("ConfigMap", f"{namespace}/{name}")
                if current is None:
                    return self._status(404, "NotFound", f'configmaps "{name}" not found')
                meta = body.setdefault("metadata", {}) if isinstance(body, dict) else None
                if meta is None or meta.get("name") != name or meta.get("namespace", namespace) != namespace:
                    return self._status(400, "BadRequest", "the name or namespace of the object does not match the URL")
                wanted = meta.get("resourceVersion")
                if wanted and wanted != current["metadata"]["resourceVersion"]:
                    return self._status(409, "Conflict", f'Operation cannot be fulfilled on configmaps "{name}": '
                                                         "the object has been modified")
                meta["namespace"], meta["uid"] = namespace, current["metadata"].get("uid")
                self._send_json(200, server.put("ConfigMap", body))

        def do_PATCH(self) -> None:
            begun = self._begin("PATCH")
            if begun is None:
                return
            path, _query, body = begun
            segments = path.strip("/").split("/")
            content_type = self.headers.get("Content-Type")
            if content_type not in ("application/merge-patch+json", "application/strategic-merge-patch+json"):
                return self._status(415, "UnsupportedMediaType", str(content_type))
            strategic = content_type == "application/strategic-merge-patch+json"
            # /apis/kgwe.io/v1alpha1/{resource}/{name}/status: a cluster-scoped custom object's status.
            if len(segments) == 6 and segments[0] == "apis" and segments[5] == "status":
                collection = server.collections.get("/" + "/".join(segments[:4]))
                if collection is None or strategic:  # custom resources take no strategic merge patch
                    return self._status(415 if strategic else 404, "NotFound", path)
                current = collection.objects.get(segments[4])
                if current is None:
                    return self._status(404, "NotFound", f'{segments[3]} "{segments[4]}" not found')
                if not isinstance(body, dict) or set(body) - {"status", "metadata"}:
                    return self._status(422, "Invalid", "the status subresource changes status only")
                patched = copy.deepcopy(current)
                patched["status"] = _merge_patch(current.get("status"), body.get("status"))
                return self._send_json(200, server.put(collection.kind, patched))
            # /apis/scheduling.k8s.io/v1alpha2/namespaces/{ns}/{resource}/{name}: a merge patch (metadata: owner
            # references), refused 409 on a stale resourceVersion and 422 when it changes the immutable spec.
            collection_path = "/" + "/".join([*segments[:3], segments[5]]) if len(segments) == 7 else ""
            if collection_path in fake_workload_api.RESOURCES and collection_path in server.collections:
                collection = server.collections[collection_path]
                current = copy.deepcopy(collection.objects.get(f"{segments[4]}/{segments[6]}"))
                if current is None:
                    return self._status(404, "NotFound", f'{segments[5]} "{segments[6]}" not found')
                if strategic or not isinstance(body, dict):
                    return self._status(415, "UnsupportedMediaType", "this fake takes merge patches of these")
                wanted = (body.get("metadata") or {}).get("resourceVersion")
                if wanted and wanted != current["metadata"]["resourceVersion"]:
                    return self._status(409, "Conflict", f'Operation cannot be fulfilled on {segments[5]} '
                                                         f'"{segments[6]}": the object has been modified')
                patched = _merge_patch(current, body)
                problem = fake_workload_api.update_problem(collection.kind, current, patched)
                if problem is not None:
                    return self._status(422, "Invalid", f'{collection.kind}.scheduling.k8s.io "{segments[6]}" is '
                                                        f"invalid: {problem}")
                return self._send_json(200, server.put(collection.kind, patched))
            # /api/v1/nodes/{name}: a merge patch (labels), refused 409 on a stale resourceVersion.
            if len(segments) == 4 and segments[:3] == ["api", "v1", "nodes"]:
                node = server.get("Node", segments[3])
                if node is None:
                    return self._status(404, "NotFound", f'nodes "{segments[3]}" not found')
                if strategic or not isinstance(body, dict):
                    return self._status(415, "UnsupportedMediaType", "this fake takes merge patches of nodes")
                wanted = (body.get("metadata") or {}).get("resourceVersion")
                if wanted and wanted != node["metadata"]["resourceVersion"]:
                    return self._status(409, "Conflict", f'Operation cannot be fulfilled on nodes "{segments[3]}": '
                                                         "the object has been modified")
                return self._send_json(200, server.put("Node", _merge_patch(node, body)))
            # /api/v1/namespaces/{ns}/pods/{name}[/status]
            if len(segments) not in (6, 7) or segments[4] != "pods" or (len(segments) == 7 and segments[6] != "status"):
                return self._status(404, "NotFound", path)
            key = f"{segments[3]}/{segments[5]}"
            current = server.get("Pod", key)
            if current is None:
                return self._status(404, "NotFound", f'pods "{segments[5]}" not found')
            if not isinstance(body, dict):
                return self._status(400, "BadRequest", "the patch is not an object")
            wanted = (body.get("metadata") or {}).get("resourceVersion")
            if wanted and wanted != current["metadata"]["resourceVersion"]:
                return self._status(409, "Conflict", f'Operation cannot be fulfilled on pods "{segments[5]}": the '
                                                     "object has been modified; please apply your changes to the "
                                                     "latest version and try again")
            if len(segments) == 7:  # the status subresource: status only, conditions merged by type
                patched = copy.deepcopy(current)
                status = body.get("status") or {}
                conditions = status.get("conditions") if strategic else None
                merged = _merge_patch(current.get("status"), {k: v for k, v in status.items() if k != "conditions"}
                                      if strategic else status)
                if conditions is not None:
                    by_type = {c.get("type"): c for c in (current.get("status") or {}).get("conditions") or []}
                    by_type.update({c.get("type"): c for c in conditions})
                    merged["conditions"] = list(by_type.values())
                patched["status"] = merged
                return self._send_json(200, server.put("Pod", patched))
            if strategic:
                return self._status(415, "UnsupportedMediaType", "this fake takes merge patches of pods")
            patched = _merge_patch(current, body)
            problem = pod_update_problem(current, patched)
            if problem is not None:
                return self._status(422, "Invalid", f'Pod "{segments[5]}" is invalid: {problem}')
            self._send_json(200, server.put("Pod", patched))

        # -- list and watch -------------------------------------------------------------------------
        def _list(self, path: str, query: dict[str, str]) -> None:
            collection = server.collections[path]
            token = query.get("continue")
            with server.cond:
                if token:
                    if server.expire_next_continue:
                        server.expire_next_continue = False
                        server._pages.clear()
                    if token not in server._pages:
                        return self._status(410, "Expired", "continue token expired")
                    version, keyed, start = server._pages.pop(token)
                else:
                    version, start = server.resource_version, 0
                    wanted = dict(p.split("=", 1) for p in (query.get("labelSelector") or "").split(",") if "=" in p)
                    # The snapshot of this list: the stored dicts themselves, which a later change replaces.
                    keyed = [(k, o) for k, o in sorted(collection.objects.items())
                             if all((o["metadata"].get("labels") or {}).get(k) == v for k, v in wanted.items())]
                limit = int(query.get("limit") or 0)
                end = start + limit if limit else len(keyed)
                meta: dict[str, Any] = {"resourceVersion": str(version)}
                if end < len(keyed):
                    next_token = f"page-{version}-{len(server._pages)}-{len(keyed) - end}"
                    server._pages[next_token] = (version, keyed, end)
                    meta["continue"] = next_token
                items = b",".join(collection.list_item(k, o) for k, o in keyed[start:end])
            head = orjson.dumps({"kind": f"{collection.kind}List", "apiVersion": collection.api_version,
                                 "metadata": meta})
            self._send_bytes(200, head[:-1] + b',"items":[' + items + b"]}")

        def _watch(self, path: str, query: dict[str, str]) -> None:
            collection = server.collections[path]
            since = int(query.get("resourceVersion") or 0)
            bookmarks = query.get("allowWatchBookmarks") == "true"
            deadline = time.monotonic() + float(query.get("timeoutSeconds") or 30)
            with server.cond:
                expired = since < collection.oldest_watchable
                if expired and server.expired_as_http_status:
                    return self._status(410, "Expired", f"too old resource version: {since}")
                generation = server._drop_generation
                server._open[path] = server._open.get(path, 0) + 1
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            try:
                if expired:
                    self._chunk({"type": "ERROR", "object": {
                        "kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Expired",
                        "message": f"too old resource version: {since}", "code": 410}})
                    return self._end()
                sent = since
                while True:
                    with server.cond:
                        if server._drop_generation != generation or server._closing:
                            break
                        # Events are appended in resourceVersion order: the new ones are a suffix.
                        pending = collection.events[bisect.bisect_right(collection.events, sent, key=_version):]
                        if not pending:
                            remaining = deadline - time.monotonic()
                            if remaining <= 0:
                                return self._end()
                            server.cond.wait(min(remaining, 0.05))
                            if self._client_gone():
                                self.close_connection = True
                                return
                            continue
                    for version, event, obj in pending:
                        sent = version
                        if event == "BOOKMARK" and not bookmarks:
                            continue
                        self._chunk({"type": event, "object": obj})
                # Dropped: half an event line, then the connection goes without the final chunk.
                half = b'{"type":"MODIFIED","object":{"kind":'
                self.wfile.write(b"%x\r\n%s\r\n" % (len(half), half))
                self.wfile.flush()
                self.close_connection = True
            except (BrokenPipeError, ConnectionResetError):
                self.close_connection = True
            finally:
                with server.cond:
                    server._open[path] -= 1

        def _client_gone(self) -> bool:
            # A watcher sends nothing after its request: readable means it closed the connection.
            readable, _, _ = select.select([self.connection], [], [], 0)
            return bool(readable) and not self.connection.recv(1, socket.MSG_PEEK)

        def _chunk(self, event: dict[str, Any]) -> None:
            data = orjson.dumps(event) + b"\n"
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()

        def _end(self) -> None:
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()

        # -- leases ---------------------------------------------------------------------------------
        def _lease_key(self, path: str) -> tuple[str, str]:
            segments = path[len(LEASES):].strip("/").split("/")  # {ns}/leases[/{name}]
            return segments[0], segments[2] if len(segments) > 2 else ""

        def _get_lease(self, path: str) -> None:
            namespace, name = self._lease_key(path)
            with server.cond:
                lease = server.leases.get(f"{namespace}/{name}")
            if lease is None:
                return self._status(404, "NotFound", f'leases.coordination.k8s.io "{name}" not found')
            self._send_json(200, lease)

        def _create_lease(self, path: str, body: dict[str, Any]) -> None:
            namespace, _ = self._lease_key(path)
            name = body["metadata"]["name"]
            with server.cond:
                if f"{namespace}/{name}" in server.leases:
                    return self._status(409, "AlreadyExists", f'leases "{name}" already exists')
                body["metadata"].update(namespace=namespace, resourceVersion=str(server._next_version()))
                server.leases[f"{namespace}/{name}"] = body
            self._send_json(201, body)

        def _replace_lease(self, path: str, body: dict[str, Any]) -> None:
            namespace, name = self._lease_key(path)
            with server.cond:
                current = server.leases.get(f"{namespace}/{name}")
                if current is None:
                    return self._status(404, "NotFound", name)
                if body["metadata"].get("resourceVersion") != current["metadata"]["resourceVersion"]:
                    return self._status(409, "Conflict", "the object has been modified")
                body["metadata"].update(namespace=namespace, resourceVersion=str(server._next_version()))
                server.leases[f"{namespace}/{name}"] = body
            self._send_json(200, body)

    return Handler


def _version(event: tuple[int, str, dict[str, Any]]) -> int:
    return event[0]


def pod_update_problem(old: dict[str, Any], new: dict[str, Any]) -> str | None:
    """What the API server's pod update validation refuses (ValidatePodUpdate), for the fields KGWE changes:
    scheduling gates may only be removed; nodeName is refused while gates remain; while the old pod is gated
    its nodeSelector may only gain keys and its required node affinity may be set when empty, else only
    grow by expressions appended inside its existing terms; otherwise neither may change."""
    old_spec, new_spec = old.get("spec") or {}, new.get("spec") or {}
    old_gates = [g.get("name") for g in old_spec.get("schedulingGates") or []]
    new_gates = [g.get("name") for g in new_spec.get("schedulingGates") or []]
    if set(new_gates) - set(old_gates):
        return "spec.schedulingGates: Forbidden: only deletion is allowed, but found new scheduling gate"
    if new_spec.get("nodeName") != old_spec.get("nodeName"):
        return "spec.nodeName: Forbidden: pod updates may not change fields other than those allowed"
    if new_spec.get("schedulingGroup") != old_spec.get("schedulingGroup"):
        return "spec.schedulingGroup: Invalid value: field is immutable"
    old_selector, new_selector = old_spec.get("nodeSelector") or {}, new_spec.get("nodeSelector") or {}
    old_required = ((old_spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution")
    new_required = ((new_spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution")
    if not old_gates:
        if old_selector != new_selector or old_required != new_required:
            return "spec: Forbidden: pod updates may not change fields other than those allowed"
        return None
    if any(k in new_selector and new_selector[k] != v for k, v in old_selector.items()) or not set(
            old_selector) <= set(new_selector):
        return "spec.nodeSelector: Invalid value: only additions to spec.nodeSelector are allowed"
    old_terms = (old_required or {}).get("nodeSelectorTerms") or []
    if old_terms:
        new_terms = (new_required or {}).get("nodeSelectorTerms") or []
        if len(new_terms) != len(old_terms):
            return ("spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms: "
                    "Invalid value: no additions/deletions to non-empty NodeSelectorTerms list are allowed")
        for before, after in zip(old_terms, new_terms, strict=True):
            for field_name in ("matchExpressions", "matchFields"):
                kept = before.get(field_name) or []
                if (after.get(field_name) or [])[: len(kept)] != kept:
                    return ("spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution: Invalid value: "
                            f"only additions to {field_name} are allowed (no mutations or deletions)")
    return None


def _merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return patch
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = _merge_patch(out.get(key), value)
    return out


# Fixtures for every test folder that talks to the fake server (import them into its conftest.py).


@pytest.fixture
def apiserver() -> Iterator[FakeApiServer]:
    server = FakeApiServer().start()
    yield server
    server.close()


@pytest.fixture
def api_client(apiserver: FakeApiServer) -> Iterator[k8s_client.ApiClient]:
    configuration = k8s_client.Configuration()
    configuration.host = apiserver.url
    with k8s_client.ApiClient(configuration) as client:
        yield client
