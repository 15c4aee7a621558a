"""One cluster model, two sources (YAML directory, Kubernetes API) behind one store.

Sources write Kubernetes objects into a `ClusterStore`; admission reads an immutable `ClusterModel`
snapshot from it. Snapshots are rebuilt lazily (after a pause of `REBUILD_SHARE` times the last build's CPU,
at most `min_rebuild_interval` seconds) and
node facts are recomputed only for nodes whose object changed, so a busy watch stream never costs a
request more than a pointer read, and a request never scans all nodes: placement reads the per-type
indexes (`TypeSummary`, webhook/cluster/type_index.py).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from policies.kernel.background import Task
from policies.vocabulary import resources
from policies.vocabulary.accelerator_types import AcceleratorTable
from policies.vocabulary.objects import ObjectView, PodView
from webhook.cluster.node_facts import NodeFacts
from webhook.cluster.node_side import NODE_SIDE_KINDS, NodeSide, read_node_side
from webhook.cluster.snapshot import ClusterModel
from webhook.cluster.workloads import WORKLOAD_KINDS, over_bound, slim_workload, workload_key

log = logging.getLogger("kgwe.cluster")

# Kinds the model keeps; everything else in a cluster directory is ignored.
KINDS = (
    "Node",
    "Pod",
    "Namespace",
    "HardwareProfile",
    "TenantQuota",
    "GPUPolicy",
    "MIGStrategy",
    "Role",
    "ClusterRole",
    "RoleBinding",
    "ClusterRoleBinding",
    # resource.k8s.io/v1 (DRA): devices, their classes, and claims (for what is allocated).
    "ResourceSlice",
    "DeviceClass",
    "ResourceClaim",
    # Read from a cluster directory only; in a cluster, admission reads a pod's templates from the API
    # (webhook/dra/claim_reader.py), so a template replaced an instant ago is never judged stale.
    "ResourceClaimTemplate",
)


def object_key(obj: dict[str, Any]) -> str:
    """`namespace/name`, or `name` for a cluster-scoped object."""
    view = ObjectView(obj)
    namespace = view.namespace
    return f"{namespace}/{view.name}" if namespace else view.name


# The longest a pass waits for the background rebuild before it builds a snapshot itself.
FRESH_WAIT_SECONDS = 1.0
# A background rebuild waits after the last one for this many times the CPU the last one took, at most
# `min_rebuild_interval`: rebuilds then take at most about 1/101 of a CPU however large the cluster, while a small
# cluster's change is seen within milliseconds (a quota pass waits for this rebuild: issue 37's release latency).
REBUILD_SHARE = 100.0

Listener = Callable[[str | None, "dict[str, Any] | None"], None]


def pod_is_finished(pod: dict[str, Any]) -> bool:
    """Succeeded or Failed: the pod holds nothing any more (PodView.terminal)."""
    return PodView(pod).terminal


class ClusterStore:
    """Mutable, thread-safe store of the objects sources report; hands out immutable snapshots."""

    def __init__(
        self,
        table: AcceleratorTable,
        staleness_seconds: float = 300.0,
        gpu_taint_keys: Iterable[str] = (resources.NVIDIA_GPU,),
        min_rebuild_interval: float = 0.5,
        workload_kinds: Iterable[str] = WORKLOAD_KINDS,
    ) -> None:
        self.table = table
        self.workload_kinds = frozenset(workload_kinds)
        self.staleness_seconds = staleness_seconds
        self.gpu_taint_keys = tuple(gpu_taint_keys)
        self.min_rebuild_interval = min_rebuild_interval
        self._objects: dict[str, dict[str, dict[str, Any]]] = {kind: {} for kind in (*KINDS, *self.workload_kinds)}
        self._facts: dict[str, tuple[str, NodeFacts]] = {}
        self._lock = threading.RLock()
        self._generation = 0
        # Moves with every change to a kind the node side reads (NODE_SIDE_KINDS): while it stands, the last build's
        # node side is still right, and a pod's change (the kubelet's status, every few seconds per pod) or a
        # TenantQuota's status rebuilds only the rest (issue 36: 0.17-0.5 s a rebuild at 10,000 nodes).
        self._node_side_generation = 0
        self._node_side: NodeSide | None = None
        self._snapshot: ClusterModel | None = None
        self._snapshot_generation = -1
        # Notified when a rebuild stored its snapshot: a pass that asks for one at least as new as a generation waits
        # here for the background rebuild instead of forcing its own (never taken while `_lock` is wanted).
        self._built = threading.Condition(threading.Lock())
        self._loaded = False
        self._last_build_cpu = 0.0  # thread CPU seconds of the last build (`REBUILD_SHARE`)
        # On demand: a read that finds the snapshot behind wakes it; it holds a thread only while it rebuilds.
        # A failed rebuild waits for the next read's wake; the last good snapshot keeps serving meanwhile.
        self._rebuilder = Task(
            "model-rebuild", self._rebuild_pending, interval=None,
            on_error=lambda _exc: log.exception("cluster model rebuild failed; serving the previous snapshot"),
        )
        self._source_problems: dict[str, tuple[str, ...]] = {}
        self._api_resources: dict[str, frozenset[str]] = {}
        # Called after every change with the kind (None: every kind) and the object changed (None for a relist),
        # outside the lock: controllers that act on changes (quotas, gangs) wake here instead of polling.
        self._listeners: list[Listener] = []

    def add_listener(self, listener: Listener) -> None:
        with self._lock:
            self._listeners.append(listener)

    def _changed(self, kind: str | None, obj: dict[str, Any] | None = None) -> None:
        for listener in list(self._listeners):
            try:
                listener(kind, obj)
            except Exception:  # a listener's trouble is its own: the source goes on
                log.exception("cluster store listener failed")

    # -- writes (sources) -------------------------------------------------------------------
    def upsert(self, obj: dict[str, Any]) -> None:
        kind = obj.get("kind")
        if kind not in self._objects:
            return
        with self._lock:
            held = self._objects[kind]
            key = object_key(obj)
            if kind in self.workload_kinds:
                if key not in held and over_bound(kind, len(held)):
                    return
                obj = slim_workload(obj)
            held[key] = obj
            self._generation += 1
            if kind in NODE_SIDE_KINDS:
                self._node_side_generation += 1
        self._changed(kind, obj)

    def delete(self, obj: dict[str, Any]) -> None:
        kind = obj.get("kind")
        if kind not in self._objects:
            return
        with self._lock:
            self._objects[kind].pop(object_key(obj), None)
            self._generation += 1
            if kind in NODE_SIDE_KINDS:
                self._node_side_generation += 1
        self._changed(kind, obj)

    def replace_kind(self, kind: str, objects: Iterable[dict[str, Any]]) -> None:
        """A relist: the kind's objects are exactly these now."""
        with self._lock:
            self._objects[kind] = self._kept(kind, objects)
            self._generation += 1
            if kind in NODE_SIDE_KINDS:
                self._node_side_generation += 1
        self._changed(kind)

    def _kept(self, kind: str, objects: Iterable[dict[str, Any]]) -> dict[str, dict[str, Any]]:
        """A kind's objects by key; workloads slimmed and bounded (webhook/cluster/workloads.py)."""
        if kind not in self.workload_kinds:
            return {object_key(o): o for o in objects}
        kept: dict[str, dict[str, Any]] = {}
        for obj in sorted(objects, key=object_key):
            if over_bound(kind, len(kept)):
                break
            kept[object_key(obj)] = slim_workload(obj)
        return kept

    def replace_all(self, objects: Iterable[dict[str, Any]]) -> None:
        by_kind: dict[str, list[dict[str, Any]]] = {kind: [] for kind in (*KINDS, *self.workload_kinds)}
        for obj in objects:
            kind = obj.get("kind")
            if isinstance(kind, str) and kind in by_kind:
                by_kind[kind].append(obj)
        grouped = {kind: self._kept(kind, items) for kind, items in by_kind.items()}
        with self._lock:
            self._objects = grouped
            self._generation += 1
            self._node_side_generation += 1
        self._changed(None)

    def set_api_resources(self, group_version: str, resources: Iterable[str] | None) -> None:
        """What API discovery answered for `group_version`: the resources it serves, or None when it is not
        served. A change is a change of the model (admission and the controllers read it from the snapshot)."""
        served = frozenset(resources) if resources is not None else None
        with self._lock:
            if self._api_resources.get(group_version) == served:
                return
            if served is None:
                self._api_resources.pop(group_version, None)
            else:
                self._api_resources[group_version] = served
            self._generation += 1
            self._node_side_generation += 1
        self._changed(None)

    def mark_loaded(self) -> None:
        with self._lock:
            self._loaded = True

    @property
    def loaded(self) -> bool:
        return self._loaded

    def set_source_problems(self, source: str, problems: Iterable[str]) -> None:
        """What `source` could not load right now (shown in `/readyz`); an empty list clears it."""
        with self._lock:
            self._source_problems[source] = tuple(problems)

    def source_problems(self) -> list[str]:
        """Every source's current problems, each line prefixed with the source's name."""
        with self._lock:
            return [f"{source}: {line}" for source, lines in self._source_problems.items() for line in lines]

    def objects(self, kind: str) -> list[dict[str, Any]]:
        with self._lock:
            return list(self._objects.get(kind, {}).values())

    # -- reads (admission) ------------------------------------------------------------------
    @property
    def generation(self) -> int:
        """Moves with every change: a snapshot built at this generation or later holds every change made so far."""
        return self._generation

    def snapshot(self, force: bool = False, *, at_least: int | None = None, wait: float | None = None) -> ClusterModel:
        """The latest snapshot. After a change it is rebuilt on a background thread (`REBUILD_SHARE` times the
        last build's CPU after the last build, at most `min_rebuild_interval` seconds) while requests keep reading
        the previous one, so no request waits for a rebuild (a pod's change rebuilds only the pod side,
        node_side.py). The first build, `force`, and `min_rebuild_interval <= 0` rebuild at once.

        `at_least`: a snapshot built at that generation or later (a controller's pass that must see the change that
        woke it): the background rebuild's, waited for at most `wait` seconds (default twice `min_rebuild_interval`,
        at most `FRESH_WAIT_SECONDS`), then one built now. The passes and admission share one rebuild per interval
        instead of one forced per pass (issue 36: a rebuild copies every pod's entry, holding the GIL throughout)."""
        # The generation first: a rebuild stores its snapshot, then its generation. The other way round, a rebuild
        # finishing between the two reads passed the older snapshot off as current, even to `force` (a quota
        # pass would read the marks it took against a snapshot without their changes).
        built = self._snapshot_generation
        current = self._snapshot
        if current is not None and built == self._generation:
            return current
        if current is None or force or self.min_rebuild_interval <= 0:
            return self._rebuild()
        self._rebuild_in_background()
        if at_least is None or built >= at_least:
            return current
        if wait is None:
            wait = min(2 * self.min_rebuild_interval, FRESH_WAIT_SECONDS)
        return self._built_by(at_least, wait)

    def _built_by(self, generation: int, wait: float) -> ClusterModel:
        """The background rebuild's snapshot once it is built at `generation` or later, or one built now after `wait`
        seconds (the rebuild failed, or is slower than its interval)."""
        deadline = time.monotonic() + wait
        with self._built:
            while self._snapshot_generation < generation:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._built.wait(left)
            else:
                current = self._snapshot  # stored before its generation: at least as new as the one just read
                assert current is not None
                return current
        return self._rebuild()

    def _rebuild(self) -> ClusterModel:
        with self._lock:
            if self._snapshot is not None and self._snapshot_generation == self._generation:
                return self._snapshot
            generation = self._generation  # writers hold the lock too: the build sees exactly this generation
            started = time.thread_time()
            snapshot = self._snapshot = self._build()
            self._last_build_cpu = time.thread_time() - started
            self._snapshot_generation = generation
        with self._built:
            self._built.notify_all()
        return snapshot

    def _rebuild_in_background(self) -> None:
        self._rebuilder.wake()

    def _rebuild_pending(self) -> None:
        """The `model-rebuild` task's body: rebuild until the snapshot is current, each build `REBUILD_SHARE`
        times the last one's CPU after it (at most `min_rebuild_interval` seconds)."""
        while self._snapshot_generation != self._generation:
            current = self._snapshot
            if current is not None:
                pause = min(self.min_rebuild_interval, REBUILD_SHARE * self._last_build_cpu)
                wait = pause - (time.monotonic() - current.built_at)
                if wait > 0:
                    time.sleep(wait)
            self._rebuild()

    def _build(self) -> ClusterModel:
        side = self._node_side
        if side is None or side.generation != self._node_side_generation or side.timed:
            side = self._node_side = self._build_node_side()
        objs = self._objects
        facts = side.facts
        return ClusterModel(
            nodes=facts,
            node_objects=side.node_objects,
            pods=dict(objs["Pod"]),
            namespaces={object_key(n): n for n in objs["Namespace"].values()},
            hardware_profiles={object_key(o): o for o in objs["HardwareProfile"].values()},
            tenant_quotas={object_key(o): o for o in objs["TenantQuota"].values()},
            gpu_policies={object_key(o): o for o in objs["GPUPolicy"].values()},
            rbac={
                kind: list(objs[kind].values()) for kind in ("Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding")
            },
            types=side.types,
            generation=self._generation,
            built_at=time.monotonic(),
            table=self.table,
            device_classes={object_key(o): o for o in objs["DeviceClass"].values()},
            resource_claims=dict(objs["ResourceClaim"]),
            claim_templates=dict(objs["ResourceClaimTemplate"]),
            workloads={
                workload_key(o): o for kind in sorted(self.workload_kinds) for o in objs.get(kind, {}).values()
            },
            mig_strategies={object_key(o): o for o in objs["MIGStrategy"].values()},
            api_resources=dict(self._api_resources),
        )

    def _build_node_side(self) -> NodeSide:
        side, self._facts = read_node_side(
            self._node_side_generation, self._objects, self._facts, self.table, self.staleness_seconds,
            self.gpu_taint_keys,
        )
        return side
