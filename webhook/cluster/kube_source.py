"""The in-cluster source of the cluster model: list + watch of the Kubernetes API into a `ClusterStore`.

One thread per kind runs the reflector loop client-go's informers use: list (paged), then watch from the
list's resourceVersion with bookmarks; a stream that ends or breaks is resumed from the last
resourceVersion seen (event or bookmark), so nothing is missed; when the server answers 410 Gone (as an
ERROR event or as the HTTP status) the history is gone, so the kind is listed again and replaces the
store's copy wholesale (`ClusterStore.replace_kind`), which also drops objects deleted meanwhile.
Errors back off exponentially with jitter. A kgwe.io custom resource whose CRD is not installed counts
as empty (logged) and is retried every `missing_crd_retry_seconds`.

Objects travel as raw JSON (`orjson` over the ApiClient's connection, auth and TLS; none of the
client's model classes), so the store holds the API's camelCase shape with `kind` and `apiVersion` set.

Pods are slimmed to what KGWE reads, because pods dominate a cluster's objects (`slim_pod`):
metadata name, namespace, uid, labels, annotations, ownerReferences, resourceVersion, creationTimestamp;
spec nodeName, schedulerName, affinity, nodeSelector, tolerations, schedulingGates, and containers /
initContainers reduced to name and resources (plus an init container's restartPolicy, which makes it a sidecar);
status phase. Everything else (images, env, volumes, conditions, container statuses) is dropped.
Other kinds are kept whole except `metadata.managedFields` and a node's `status.images` (`slim_object`).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import random
import threading
import time
from collections.abc import Callable, Collection, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import orjson
import urllib3
from kubernetes import client as k8s_client
from kubernetes import config as k8s_config
from kubernetes.client.exceptions import ApiException

from policies.background import Task
from policies.vocabulary import keys
from policies.vocabulary.backoff import Backoff
from policies.vocabulary.objects import ContainerView, ObjectView, PodView, string
from webhook.cluster.model import ClusterStore

log = logging.getLogger("kgwe.cluster.kube")

TEST_KUBECONFIG_ENV = "KGWE_TEST_KUBECONFIG"
CRD_GROUP_VERSION = keys.API_VERSION
RBAC_GROUP_VERSION = "rbac.authorization.k8s.io/v1"
DRA_GROUP_VERSION = "resource.k8s.io/v1"
SHORT_WATCH_SECONDS = 1.0


@dataclass(frozen=True)
class WatchedKind:
    kind: str
    api_version: str
    path: str  # the cluster-wide collection, e.g. /api/v1/pods
    namespaced: bool = False
    custom: bool = False  # served by a CRD that may not be installed
    # Read for the views only (workloads, webhook/cluster/workloads.py): a 403 (no RBAC for it) counts as
    # absent like a missing CRD, and readiness does not wait for its first list.
    view_only: bool = False


def workload_watches(kinds: Iterable[tuple[str, str, str]]) -> tuple[WatchedKind, ...]:
    """Watches of workload kinds given as (kind, apiVersion, resource), cluster-wide, CRD-optional and
    view-only; a kind name seen twice (two groups) is watched once, the first one."""
    found: dict[str, WatchedKind] = {}
    for kind, api_version, resource in kinds:
        prefix = "/api" if "/" not in api_version else "/apis"
        found.setdefault(kind, WatchedKind(kind, api_version, f"{prefix}/{api_version}/{resource}",
                                           namespaced=True, custom=True, view_only=True))
    return tuple(found.values())


WATCHED_KINDS: tuple[WatchedKind, ...] = (
    WatchedKind("Node", "v1", "/api/v1/nodes"),
    WatchedKind("Pod", "v1", "/api/v1/pods", namespaced=True),
    WatchedKind("Namespace", "v1", "/api/v1/namespaces"),
    WatchedKind("Role", RBAC_GROUP_VERSION, f"/apis/{RBAC_GROUP_VERSION}/roles", namespaced=True),
    WatchedKind("ClusterRole", RBAC_GROUP_VERSION, f"/apis/{RBAC_GROUP_VERSION}/clusterroles"),
    WatchedKind("RoleBinding", RBAC_GROUP_VERSION, f"/apis/{RBAC_GROUP_VERSION}/rolebindings", namespaced=True),
    WatchedKind("ClusterRoleBinding", RBAC_GROUP_VERSION, f"/apis/{RBAC_GROUP_VERSION}/clusterrolebindings"),
    WatchedKind("HardwareProfile", CRD_GROUP_VERSION, f"/apis/{CRD_GROUP_VERSION}/hardwareprofiles", custom=True),
    WatchedKind("TenantQuota", CRD_GROUP_VERSION, f"/apis/{CRD_GROUP_VERSION}/tenantquotas", custom=True),
    WatchedKind("GPUPolicy", CRD_GROUP_VERSION, f"/apis/{CRD_GROUP_VERSION}/gpupolicies", custom=True),
    # DRA (GA in 1.34): `custom` because older API servers do not serve resource.k8s.io/v1 at all.
    WatchedKind("ResourceSlice", DRA_GROUP_VERSION, f"/apis/{DRA_GROUP_VERSION}/resourceslices", custom=True),
    WatchedKind("DeviceClass", DRA_GROUP_VERSION, f"/apis/{DRA_GROUP_VERSION}/deviceclasses", custom=True),
    WatchedKind(
        "ResourceClaim", DRA_GROUP_VERSION, f"/apis/{DRA_GROUP_VERSION}/resourceclaims", namespaced=True, custom=True
    ),
)

# Errors after which a kind's loop backs off and retries; anything else is a bug and propagates.
RETRYABLE = (ApiException, urllib3.exceptions.HTTPError, OSError, orjson.JSONDecodeError, ValueError)


# -- raw JSON over an ApiClient -------------------------------------------------------------------


class KubeJson:
    """Raw JSON requests through a kubernetes `ApiClient`: its host, auth (token refresh included) and TLS."""

    def __init__(self, api_client: k8s_client.ApiClient) -> None:
        self.api_client = api_client

    def open(
        self,
        method: str,
        path: str,
        *,
        query: Iterable[tuple[str, str]] = (),
        body: dict[str, Any] | None = None,
        content_type: str = "application/json",
        timeout: float | tuple[float, float] | None = None,
    ) -> urllib3.BaseHTTPResponse:
        """Send a request; the caller reads (or streams) and releases the response. Non-2xx raises ApiException."""
        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = content_type
        serialized = self.api_client.param_serialize(
            method=method,
            resource_path=path,
            query_params=list(query) or None,
            header_params=headers,
            body=body,
            auth_settings=["BearerToken"],
        )
        response = self.api_client.call_api(*serialized, _request_timeout=timeout)
        raw: urllib3.BaseHTTPResponse = response.response
        if not 200 <= raw.status <= 299:
            data = raw.read()
            raw.release_conn()
            raise ApiException(status=raw.status, reason=raw.reason, body=data.decode("utf-8", "replace"))
        return raw

    def request(
        self,
        method: str,
        path: str,
        *,
        query: Iterable[tuple[str, str]] = (),
        body: dict[str, Any] | None = None,
        content_type: str = "application/json",
        timeout: float | tuple[float, float] | None = None,
    ) -> dict[str, Any]:
        raw = self.open(method, path, query=query, body=body, content_type=content_type, timeout=timeout)
        try:
            data = raw.read()
        finally:
            raw.release_conn()
        loaded = orjson.loads(data) if data else {}
        return loaded if isinstance(loaded, dict) else {}


def load_kube_client(kubeconfig: str | None) -> k8s_client.ApiClient:
    """An ApiClient from `kubeconfig`, else $KGWE_TEST_KUBECONFIG, else the in-cluster service account when
    running in a pod, else the usual kubeconfig ($KUBECONFIG or ~/.kube/config) as kubectl finds it."""
    configuration = k8s_client.Configuration()
    path = kubeconfig or os.environ.get(TEST_KUBECONFIG_ENV)
    if path:
        k8s_config.load_kube_config(config_file=path, client_configuration=configuration)
    elif os.environ.get("KUBERNETES_SERVICE_HOST"):
        k8s_config.load_incluster_config(client_configuration=configuration)
    else:
        k8s_config.load_kube_config(client_configuration=configuration)
    # One long-lived watch per kind plus patches and lease renewals share the pool.
    configuration.connection_pool_maxsize = max(configuration.connection_pool_maxsize or 0, 32)
    return k8s_client.ApiClient(configuration)


# -- pod slimming ---------------------------------------------------------------------------------

POD_METADATA_FIELDS = (
    "name", "namespace", "uid", "labels", "annotations", "ownerReferences", "resourceVersion", "creationTimestamp",
)
POD_SPEC_FIELDS = ("nodeName", "schedulerName", "affinity", "nodeSelector", "tolerations", "schedulingGates")


def _slim_container(container: ContainerView, init: bool) -> dict[str, Any]:
    raw = container.raw
    out = {"name": raw.get("name"), "resources": raw.get("resources") or {}}
    if init and raw.get("restartPolicy"):
        out["restartPolicy"] = raw["restartPolicy"]
    return out


def slim_pod(pod: dict[str, Any]) -> dict[str, Any]:
    """The parts of a pod KGWE reads (see the module docstring); the rest is dropped to save memory."""
    view = PodView(pod)
    meta, spec = view.metadata, view.spec
    slim_spec: dict[str, Any] = {k: spec[k] for k in POD_SPEC_FIELDS if k in spec}
    for key, init in (("containers", False), ("initContainers", True)):
        containers = view.init_containers if init else view.containers
        if containers:
            slim_spec[key] = [_slim_container(c, init) for c in containers]
    out: dict[str, Any] = {
        "apiVersion": view.api_version or "v1",
        "kind": "Pod",
        "metadata": {k: meta[k] for k in POD_METADATA_FIELDS if k in meta},
        "spec": slim_spec,
    }
    phase = view.phase
    if phase:
        out["status"] = {"phase": phase}
    return out


def slim_object(obj: dict[str, Any]) -> dict[str, Any]:
    """Any other kind without what KGWE never reads and what is large: managedFields, a node's image list."""
    meta = ObjectView(obj).metadata
    status = obj.get("status")
    if "managedFields" not in meta and not (isinstance(status, dict) and "images" in status):
        return obj
    out = {**obj, "metadata": {k: v for k, v in meta.items() if k != "managedFields"}}
    if isinstance(status, dict) and "images" in status:
        out["status"] = {k: v for k, v in status.items() if k != "images"}
    return out


# -- the source -----------------------------------------------------------------------------------


class _Expired(Exception):
    """The resourceVersion we hold is older than the server's history: relist."""


class _CrdMissing(Exception):
    pass


@dataclass
class KindStatus:
    """What one kind's loop has done; read by readiness and tests."""

    listed: bool = False
    resource_version: str | None = None
    lists: int = 0
    watches: int = 0
    events: int = 0
    errors: int = 0
    crd_missing: bool = False
    last_error: str = ""


NamespaceFilter = Callable[[str], bool] | Collection[str]


class KubeClusterSource:
    """Keeps a `ClusterStore` equal to the API server's objects of the kinds KGWE reads.

    `namespace_filter` limits namespaced kinds (Pods, Roles, RoleBindings): a predicate on the namespace
    name, or a collection of namespace names to keep. Cluster-scoped kinds are always kept.
    """

    def __init__(
        self,
        store: ClusterStore,
        api_client: k8s_client.ApiClient,
        *,
        namespace_filter: NamespaceFilter | None = None,
        kinds: Iterable[str] | None = None,
        workloads: Iterable[WatchedKind] = (),
        watch_timeout_seconds: int = 300,
        list_page_size: int = 500,
        backoff_base: float = 0.5,
        backoff_cap: float = 30.0,
        missing_crd_retry_seconds: float = 60.0,
        connect_timeout: float = 10.0,
    ) -> None:
        self.store = store
        self.api = KubeJson(api_client)
        if namespace_filter is None or callable(namespace_filter):
            self._keep_namespace: Callable[[str], bool] | None = namespace_filter
        else:
            allowed = frozenset(namespace_filter)
            self._keep_namespace = allowed.__contains__
        wanted = set(kinds) if kinds is not None else None
        self.kinds = tuple(k for k in WATCHED_KINDS if wanted is None or k.kind in wanted)
        if wanted is not None and len(self.kinds) != len(wanted):
            unknown = wanted - {k.kind for k in self.kinds}
            raise ValueError(f"cannot watch kinds {sorted(unknown)}")
        watched_names = {k.kind for k in self.kinds}
        self.kinds += tuple(w for w in workloads if w.kind not in watched_names)
        self.watch_timeout_seconds = watch_timeout_seconds
        self.list_page_size = list_page_size
        self.backoff_base = backoff_base
        self.backoff_cap = backoff_cap
        self.missing_crd_retry_seconds = missing_crd_retry_seconds
        self.connect_timeout = connect_timeout
        self.status: dict[str, KindStatus] = {k.kind: KindStatus() for k in self.kinds}
        self._stop = threading.Event()
        self._loaded = threading.Event()
        self._lock = threading.Lock()
        self._open_streams: set[urllib3.BaseHTTPResponse] = set()
        # One watch task per kind (`watch-KIND`): its body is the kind's reflector loop, which retries API
        # errors itself and returns only once stopped; the task's backoff covers anything else it raises.
        self.tasks = [
            Task(f"watch-{watched.kind}", functools.partial(self._run, watched), interval=0,
                 backoff=Backoff(backoff_base, backoff_cap, jitter=0.5), interrupt=self._interrupt)
            for watched in self.kinds
        ]

    # -- lifecycle ------------------------------------------------------------------------------
    def start(self) -> None:
        self._stop.clear()
        for task in self.tasks:
            task.start()

    def stop(self, timeout: float = 5.0) -> None:
        """End every watch (open streams are closed under them) and join each task within `timeout`."""
        self._interrupt()
        for task in self.tasks:
            task.stop(timeout)

    def _interrupt(self) -> None:
        self._stop.set()
        with self._lock:
            streams = list(self._open_streams)
        for stream in streams:
            _interrupt(stream)

    def wait_loaded(self, timeout: float | None = None) -> bool:
        """True once every kind has been listed at least once (the store is then marked loaded)."""
        return self._loaded.wait(timeout)

    def wait_all_listed(self, timeout: float) -> bool:
        """True once every kind, the view-only workload kinds included, has been listed (or found absent):
        what a one-shot report waits for before it stops the watch."""
        deadline = time.monotonic() + timeout
        while not all(s.listed for s in self.status.values()):
            if self._stop.wait(min(0.05, max(0.0, deadline - time.monotonic()))) or time.monotonic() >= deadline:
                return all(s.listed for s in self.status.values())
        return True

    # -- one kind's reflector loop ----------------------------------------------------------------
    def _run(self, watched: WatchedKind) -> None:
        status = self.status[watched.kind]
        # Jitter up to half of each delay: the workers of every replica watch the same API server.
        backoff = Backoff(self.backoff_base, self.backoff_cap, jitter=0.5)
        while not self._stop.is_set():
            delay = 0.0
            try:
                if status.resource_version is None:
                    self._list(watched, status)
                self._watch(watched, status, backoff)
            except _Expired:
                log.info("%s: resourceVersion %s expired, relisting", watched.kind, status.resource_version)
                status.resource_version = None
                # Relist at once; only expiries with no events in between back off (a server stuck in 410).
                delay = backoff.next_delay() if backoff.attempts else 0.0
                backoff.attempts = max(backoff.attempts, 1)
            except _CrdMissing:
                if not status.crd_missing:
                    log.warning(
                        "%s: the CRD for %s is not installed (or, view-only, not readable); treating it as empty, "
                        "retrying every %.0fs",
                        watched.kind, watched.path, self.missing_crd_retry_seconds,
                    )
                status.crd_missing = True
                status.resource_version = None
                self.store.replace_kind(watched.kind, [])
                self._mark_listed(status)
                delay = self.missing_crd_retry_seconds
            except RETRYABLE as exc:
                if self._stop.is_set():
                    break
                status.errors += 1
                status.last_error = _describe(exc)
                delay = backoff.next_delay()
                log.warning("%s: %s; retrying in %.1fs", watched.kind, status.last_error, delay)
            if delay:
                self._stop.wait(delay)

    def _list(self, watched: WatchedKind, status: KindStatus) -> None:
        items: list[dict[str, Any]] = []
        continue_token = ""
        restarted = False
        while True:
            query = [("limit", str(self.list_page_size))]
            if continue_token:
                query.append(("continue", continue_token))
            try:
                page = self.api.request("GET", watched.path, query=query, timeout=(self.connect_timeout, 120.0))
            except ApiException as exc:
                if (exc.status == 404 and watched.custom) or (exc.status == 403 and watched.view_only):
                    raise _CrdMissing from exc
                if exc.status == 410 and continue_token and not restarted:
                    # The paged snapshot expired mid-list: start over once for a consistent view.
                    items, continue_token, restarted = [], "", True
                    continue
                raise
            for item in page.get("items") or []:
                obj = self._prepare(watched, item)
                if obj is not None:
                    items.append(obj)
            listed = ObjectView(page)
            continue_token = string(listed.metadata.get("continue"))
            if not continue_token:
                break
        self.store.replace_kind(watched.kind, items)
        status.resource_version = listed.resource_version or None
        if status.resource_version is None:
            raise ValueError(f"list of {watched.path} carried no resourceVersion")
        status.lists += 1
        if status.crd_missing:
            log.info("%s: CRD installed, %d objects", watched.kind, len(items))
        status.crd_missing = False
        self._mark_listed(status)

    def _watch(self, watched: WatchedKind, status: KindStatus, backoff: Backoff) -> None:
        # Spread the stream ends so all kinds do not reconnect at the same instant.
        timeout = int(self.watch_timeout_seconds * random.uniform(1.0, 1.25))
        query = [
            ("watch", "true"),
            ("resourceVersion", str(status.resource_version)),
            ("allowWatchBookmarks", "true"),
            ("timeoutSeconds", str(timeout)),
        ]
        try:
            stream = self.api.open("GET", watched.path, query=query, timeout=(self.connect_timeout, timeout + 30.0))
        except ApiException as exc:
            if exc.status == 410:
                raise _Expired from exc
            if exc.status == 404 and watched.custom:
                raise _CrdMissing from exc
            raise
        status.watches += 1
        started, delivered = time.monotonic(), 0
        with self._lock:
            self._open_streams.add(stream)
            stopping = self._stop.is_set()  # stop() may have run while this stream was opening
        try:
            if stopping:
                return
            for event in _events(stream):
                if self._stop.is_set():
                    return
                self._apply(watched, status, event)
                delivered += 1
                backoff.reset()
        finally:
            with self._lock:
                self._open_streams.discard(stream)
            _interrupt(stream)
        if not delivered and time.monotonic() - started < SHORT_WATCH_SECONDS and not self._stop.is_set():
            # A server that closes every watch at once would otherwise be hammered in a tight loop.
            raise ValueError("watch ended immediately without events")

    def _apply(self, watched: WatchedKind, status: KindStatus, event: dict[str, Any]) -> None:
        kind = event.get("type")
        obj = event.get("object")
        if not isinstance(obj, dict):
            raise ValueError(f"watch event without an object: {str(event)[:200]}")
        if kind == "ERROR":
            code = obj.get("code")
            if code == 410:
                raise _Expired
            raise ApiException(status=code or 500, reason=str(obj.get("message") or obj.get("reason") or "watch error"))
        version = ObjectView(obj).resource_version
        if kind == "BOOKMARK":
            if version:
                status.resource_version = version
            return
        prepared = self._prepare(watched, obj)
        if kind in ("ADDED", "MODIFIED"):
            if prepared is not None:
                self.store.upsert(prepared)
        elif kind == "DELETED":
            self.store.delete(prepared if prepared is not None else _with_kind(watched, obj))
        else:
            raise ValueError(f"unknown watch event type {kind!r}")
        status.events += 1
        if version:
            status.resource_version = version

    def _prepare(self, watched: WatchedKind, obj: dict[str, Any]) -> dict[str, Any] | None:
        """The object as the store keeps it, or None when the namespace filter excludes it."""
        if watched.namespaced and self._keep_namespace is not None:
            namespace = ObjectView(obj).namespace
            if not self._keep_namespace(namespace):
                return None
        obj = _with_kind(watched, obj)
        if watched.kind == "Pod":
            return slim_pod(obj)
        return slim_object(obj)

    def _mark_listed(self, status: KindStatus) -> None:
        status.listed = True
        gating = [self.status[k.kind] for k in self.kinds if not k.view_only]
        if all(s.listed for s in gating) and not self._loaded.is_set():
            self.store.mark_loaded()
            self._loaded.set()
            log.info("cluster model loaded from the API: %s", ", ".join(k.kind for k in self.kinds))


def _with_kind(watched: WatchedKind, obj: dict[str, Any]) -> dict[str, Any]:
    # List items carry no kind/apiVersion for built-in types; the store files objects by kind.
    if obj.get("kind") != watched.kind or obj.get("apiVersion") != watched.api_version:
        obj = {**obj, "kind": watched.kind, "apiVersion": watched.api_version}
    return obj


def _events(stream: urllib3.BaseHTTPResponse) -> Iterator[dict[str, Any]]:
    """Watch events, one JSON document per line; a line cut off by a broken stream is never yielded."""
    pending = b""
    for chunk in stream.stream(65536, decode_content=True):
        pending += chunk
        *lines, pending = pending.split(b"\n")
        for line in lines:
            if line.strip():
                event = orjson.loads(line)
                if isinstance(event, dict):
                    yield event
    if pending.strip():
        event = orjson.loads(pending)
        if isinstance(event, dict):
            yield event


def _interrupt(stream: urllib3.BaseHTTPResponse) -> None:
    """Unblock a reader in another thread and drop the connection (a half-read stream cannot be reused)."""
    shutdown = getattr(stream, "shutdown", None)
    if shutdown is not None:
        # ValueError: urllib3 has not wired the socket for shutdown (the body is not being read yet);
        # RuntimeError: the stream ended cleanly and its connection is already back in the pool.
        with contextlib.suppress(OSError, RuntimeError, ValueError):
            shutdown()
    with contextlib.suppress(OSError, RuntimeError, ValueError):
        stream.close()


def _describe(exc: BaseException) -> str:
    if isinstance(exc, ApiException):
        return f"API error {exc.status} {exc.reason or ''}".strip()
    return f"{type(exc).__name__}: {exc}"
