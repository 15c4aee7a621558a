"""The in-cluster source of the cluster model: list + watch of the Kubernetes API into a `ClusterStore`.

One thread per kind runs the reflector loop client-go's informers use: list (paged), then watch from the
list's resourceVersion with bookmarks; a stream that ends or breaks is resumed from the last
resourceVersion seen (event or bookmark), so nothing is missed; when the server answers 410 Gone (as an
ERROR event or as the HTTP status) the history is gone, so the kind is listed again and replaces the
store's copy wholesale (`ClusterStore.replace_kind`), which also drops objects deleted meanwhile.
Errors back off exponentially with jitter. A kgwe.io custom resource whose CRD is not installed counts
as empty (logged) and is retried every `missing_crd_retry_seconds`.

API discovery of the group versions in `discover` (the Workload API of native gang scheduling,
webhook/gangs/native.py) runs at start and every `discovery_seconds` (task `api-discovery`): what each
serves goes into the store (`ClusterStore.set_api_resources`), and the store is marked loaded only once
every one has been answered (served or not), so no pod is admitted before KGWE knows.

Objects travel as raw JSON (`orjson` over the ApiClient's connection, auth and TLS; none of the
client's model classes), so the store holds the API's camelCase shape with `kind` and `apiVersion` set.

The kinds watched are in webhook/cluster/watched_kinds.py, the raw JSON client in
webhook/cluster/kube_json.py, and what the store keeps of each object in webhook/cluster/slimming.py.
"""

from __future__ import annotations

import functools
import logging
import random
import threading
import time
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass
from typing import Any

import urllib3
from kubernetes import client as k8s_client
from kubernetes.client.exceptions import ApiException

from policies.kernel.background import Task
from policies.vocabulary.backoff import Backoff
from policies.vocabulary.objects import ObjectView, string
from webhook.cluster.collector_pause import collector_paused, freeze_what_was_loaded
from webhook.cluster.kube_json import RETRYABLE, KubeJson, close_stream, describe_error, watch_events
from webhook.cluster.model import ClusterStore
from webhook.cluster.slimming import slim_object, slim_pod
from webhook.cluster.watched_kinds import WATCHED_KINDS, WatchedKind

log = logging.getLogger("kgwe.cluster.kube")

SHORT_WATCH_SECONDS = 1.0
WATCH_RESTART_SECONDS = 1.0  # a watch task's pause before its returned loop runs again (the tasks in __init__)


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
        discover: Iterable[str] = (),
        discovery_seconds: float = 60.0,
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
        self.discover = tuple(dict.fromkeys(discover))
        # group version -> the resources it serves (None: not served), once discovery has answered for it.
        self.discovered: dict[str, frozenset[str] | None] = {}
        self._stop = threading.Event()
        self._loaded = threading.Event()
        self._lock = threading.Lock()
        self._open_streams: set[urllib3.BaseHTTPResponse] = set()
        # One watch task per kind (`watch-KIND`): its body is the kind's reflector loop, which retries API
        # errors itself and returns only once stopped; the task's backoff covers anything else it raises. The
        # interval is the pause before a body that returned runs again: the kinds share one stop flag, so a
        # kind's loop returns as soon as any task is stopped, and with no pause its task ran it again in a
        # loop, spinning a CPU, until its own stop came (a task's stop ends the pause at once). The first run is
        # at start: without `run_at_start` every kind's first list waited that pause, and readiness with it.
        self.tasks = [
            Task(f"watch-{watched.kind}", functools.partial(self._run, watched), interval=WATCH_RESTART_SECONDS,
                 run_at_start=True, backoff=Backoff(backoff_base, backoff_cap, jitter=0.5), interrupt=self._interrupt)
            for watched in self.kinds
        ]
        if self.discover:
            self.tasks.append(Task("api-discovery", self.discover_once, interval=discovery_seconds, run_at_start=True,
                                   backoff=Backoff(backoff_base, backoff_cap, jitter=0.5),
                                   on_error=lambda exc: log.warning("API discovery: %s", describe_error(exc))))

    # -- lifecycle ------------------------------------------------------------------------------
    def start(self) -> None:
        self._stop.clear()
        for task in self.tasks:
            task.start()

    def stop(self, timeout: float = 5.0) -> None:
        """End every watch (open streams are closed under them) and join each task within `timeout`; every
        task is told to stop before any is joined, so they end together."""
        self._interrupt()
        for task in self.tasks:
            task.signal_stop()
        for task in self.tasks:
            task.stop(timeout)

    def _interrupt(self) -> None:
        self._stop.set()
        with self._lock:
            streams = list(self._open_streams)
        for stream in streams:
            close_stream(stream)

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

    # -- API discovery ----------------------------------------------------------------------------
    def discover_once(self) -> dict[str, frozenset[str] | None]:
        """Ask the API server which of `discover` it serves (GET /apis/GROUP/VERSION; 404, or 403 where discovery
        is not allowed: not served) and put the answers into the store. Any other error keeps the previous
        answer and raises at the end (the task backs off and asks again); a group version never answered yet
        counts as not served meanwhile, so that an unreachable discovery endpoint does not keep the model from
        loading: what uses it then works the way it works without it."""
        found: dict[str, frozenset[str] | None] = {}
        failed: Exception | None = None
        for group_version in self.discover:
            try:
                listed = self.api.request("GET", f"/apis/{group_version}", timeout=(self.connect_timeout, 30.0))
            except RETRYABLE as exc:
                status = getattr(exc, "status", None)
                if status not in (403, 404):
                    failed = exc
                    if group_version not in self.discovered:
                        log.warning("API discovery of %s failed (%s); taken as not served until it answers",
                                    group_version, describe_error(exc))
                        self.discovered[group_version] = None
                        self.store.set_api_resources(group_version, None)
                    continue
                if status == 403:
                    log.warning("API discovery of %s is forbidden; taken as not served", group_version)
                found[group_version] = None
                continue
            found[group_version] = frozenset(
                str(r.get("name")) for r in listed.get("resources") or []
                if isinstance(r, dict) and r.get("name") and "/" not in str(r.get("name"))  # not subresources
            )
        for group_version, resources in found.items():
            if self.discovered.get(group_version, ()) != resources:
                log.info("API discovery: %s %s", group_version,
                         f"serves {', '.join(sorted(resources))}" if resources is not None else "is not served")
            self.store.set_api_resources(group_version, resources)
        self.discovered.update(found)
        self._maybe_loaded()
        if failed is not None:
            raise failed
        return found

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
                status.last_error = describe_error(exc)
                delay = backoff.next_delay()
                log.warning("%s: %s; retrying in %.1fs", watched.kind, status.last_error, delay)
            if delay:
                self._stop.wait(delay)

    def _list(self, watched: WatchedKind, status: KindStatus) -> None:
        with collector_paused():  # nothing listed makes cycles; collecting while millions survive is most of it
            items, listed = self._read_pages(watched)
            self.store.replace_kind(watched.kind, items)
        status.resource_version = listed.resource_version or None
        if status.resource_version is None:
            raise ValueError(f"list of {watched.path} carried no resourceVersion")
        status.lists += 1
        if status.crd_missing:
            log.info("%s: CRD installed, %d objects", watched.kind, len(items))
        status.crd_missing = False
        self._mark_listed(status)

    def _read_pages(self, watched: WatchedKind) -> tuple[list[dict[str, Any]], ObjectView]:
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
                return items, listed

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
            for event in watch_events(stream):
                if self._stop.is_set():
                    return
                self._apply(watched, status, event)
                delivered += 1
                backoff.reset()
        finally:
            with self._lock:
                self._open_streams.discard(stream)
            close_stream(stream)
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
        self._maybe_loaded()

    def _maybe_loaded(self) -> None:
        gating = [self.status[k.kind] for k in self.kinds if not k.view_only]
        discovered = all(gv in self.discovered for gv in self.discover)
        if not all(s.listed for s in gating) or not discovered:
            return
        with self._lock:  # one announcement, whichever thread (a kind's list, discovery) completes the set
            if self._loaded.is_set():
                return
            self.store.mark_loaded()
            freeze_what_was_loaded()
            self._loaded.set()
            log.info("cluster model loaded from the API: %s", ", ".join(k.kind for k in self.kinds))


def _with_kind(watched: WatchedKind, obj: dict[str, Any]) -> dict[str, Any]:
    # List items carry no kind/apiVersion for built-in types; the store files objects by kind.
    if obj.get("kind") != watched.kind or obj.get("apiVersion") != watched.api_version:
        obj = {**obj, "kind": watched.kind, "apiVersion": watched.api_version}
    return obj
