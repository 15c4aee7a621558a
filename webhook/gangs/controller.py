"""The gang controller: ungates a gang only when all of it can start in one room (leader only).

The one writer of gang records. Every `interval_seconds` (and at once when a gang member changes), from a
store snapshot and the records in the `GangLedger`, it plans every gang (`planning.plan_gangs`: records
gangs it sees for the first time, promises rooms, re-plans waiting gangs, drops records of gangs that are
bound or gone), stores the records with compare-and-swap, then acts:

- a release: the record says so first (the commit point), then every gated member is pinned to the room
  (`spec.nodeSelector` gains the room's label: an addition, which Kubernetes allows while a pod is gated)
  and its `kgwe.io/gang` gate is removed, each with the resourceVersion read so a concurrent change is
  never overwritten; an interrupted release is finished next pass;
- a warning: an Event on the gated members of a gang waiting longer than `gangs.waitWarningSeconds`.

Where members name the gang's PodGroup (native gang scheduling: the Workload API is served, webhook/gangs/
native.py), a release first makes the gang's Workload and PodGroup exist (native_writer.py `NativeGangWriter.ensure`,
idempotent); only then are members pinned and ungated, and kube-scheduler binds them all or none.

Members are never pinned before the release, so a waiting gang can move to any room: KEP-3838 lets a
gated pod's node constraints only grow, and a pin is the one growth made, once.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime
from functools import partial
from typing import TYPE_CHECKING, Any, Protocol

from prometheus_client import Counter, Gauge

from policies.kernel.api_errors import api_exception
from policies.kernel.background import Task
from policies.kernel.metrics import replace_series
from policies.vocabulary.objects import PodView, objects
from webhook.cluster.model import ClusterModel, ClusterStore
from webhook.config import Config
from webhook.gang_spec import GATE, membership
from webhook.gangs.accounting import gang_pods
from webhook.gangs.ledger import GangRecord, GangStore, GangStoreUnavailable, Records, records_to_json
from webhook.gangs.native import pod_group_name, served
from webhook.gangs.planning import Action, plan_gangs
from webhook.placement.rooms import RoomId

if TYPE_CHECKING:  # the writer talks to an API server: imported where one is given
    from webhook.gangs.native_writer import NativeGangWriter

log = logging.getLogger("kgwe.gangs.controller")

FIELD_MANAGER = "kgwe-controller"
# Reads and plans of one pass when other writers' compare-and-swap wins come in between (planning is CPU only).
PASS_ATTEMPTS = 4

RECORDS = Gauge("kgwe_gang_records", "Gang records, by state (waiting: gated; released: being scheduled)", ["state"])
WAITING_TOO_LONG = Gauge(
    "kgwe_gang_waiting_too_long", "Gangs waiting gated longer than gangs.waitWarningSeconds, by namespace",
    ["namespace"],
)
SHORT_GPUS = Gauge("kgwe_gang_short_gpus", "GPUs missing in their rooms for the complete gangs that wait")
RELEASED = Counter("kgwe_gang_released_total", "Gangs whose gates were removed (all members, one room)")
REPLANS = Counter("kgwe_gang_replans_total", "Waiting gangs moved to another room")
BOUND = Counter("kgwe_gang_bound_total", "Gangs bound fully (their records released)")


class PodWriter(Protocol):
    """What the controller changes in the cluster."""

    def pin(self, pod: dict[str, Any], room: RoomId) -> str:
        """Add the room's label to the pod's nodeSelector; returns the new resourceVersion."""

    def ungate(self, pod: dict[str, Any], resource_version: str) -> None:
        """Remove the `kgwe.io/gang` gate (the pod's other gates stay)."""

    def event(self, pod: dict[str, Any], reason: str, message: str, kind: str = "Warning") -> None:
        """An Event (`kind` Warning or Normal) on the pod."""


def kube_pod_writer(api_client: Any) -> PodWriter:
    from webhook.cluster.kube_json import KubeJson

    return _KubePodWriter(KubeJson(api_client))


def kube_native_writer(api_client: Any) -> NativeGangWriter:
    from webhook.cluster.kube_json import KubeJson
    from webhook.gangs.native_writer import NativeGangWriter

    return NativeGangWriter(KubeJson(api_client))


class _KubePodWriter:
    def __init__(self, api: Any) -> None:
        self.api = api

    def _patch(self, pod: dict[str, Any], body: dict[str, Any]) -> dict[str, Any]:
        view = PodView(pod)
        answer = self.api.request(
            "PATCH",
            f"/api/v1/namespaces/{view.namespace}/pods/{view.name}",
            query=[("fieldManager", FIELD_MANAGER)],
            body=body,
            content_type="application/merge-patch+json",
            timeout=(10.0, 30.0),
        )
        return answer if isinstance(answer, dict) else {}

    def pin(self, pod: dict[str, Any], room: RoomId) -> str:
        version = PodView(pod).resource_version
        body = {"metadata": {"resourceVersion": version}, "spec": {"nodeSelector": {room.key: room.value}}}
        return PodView(self._patch(pod, body)).resource_version

    def ungate(self, pod: dict[str, Any], resource_version: str) -> None:
        gates = [g for g in objects(PodView(pod).spec.get("schedulingGates")) if g.get("name") != GATE]
        body = {"metadata": {"resourceVersion": resource_version}, "spec": {"schedulingGates": gates or None}}
        self._patch(pod, body)

    def event(self, pod: dict[str, Any], reason: str, message: str, kind: str = "Warning") -> None:
        view = PodView(pod)
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        namespace = view.namespace or "default"
        self.api.request(
            "POST",
            f"/api/v1/namespaces/{namespace}/events",
            body={
                "apiVersion": "v1",
                "kind": "Event",
                "metadata": {"generateName": f"{view.name}.", "namespace": namespace},
                "involvedObject": {"kind": "Pod", "apiVersion": "v1", "namespace": namespace,
                                   "name": view.name, "uid": view.uid},
                "reason": reason,
                "message": message[:1024],
                "type": kind,
                "source": {"component": "kgwe"},
                "firstTimestamp": now,
                "lastTimestamp": now,
                "count": 1,
            },
            timeout=(10.0, 30.0),
        )


class GangController:
    def __init__(
        self,
        store: ClusterStore,
        gangs: GangStore,
        config: Config,
        writer: PodWriter | None,
        *,
        interval_seconds: float = 5.0,
        is_leader: Callable[[], bool] = lambda: True,
        clock: Callable[[], float] = time.time,
        native: NativeGangWriter | None = None,
    ) -> None:
        self.store = store
        self.native = native  # creates the Workload and PodGroup of gangs whose members name one
        self.gangs = gangs
        self.config = config
        self.writer = writer
        self.interval_seconds = interval_seconds
        self.is_leader = is_leader
        self.clock = clock
        self.task = Task("gangs", self._reconcile_quietly, interval=interval_seconds, leader_only=True,
                         is_leader=lambda: self.is_leader(),
                         on_error=lambda _exc: log.exception("gang reconcile failed"))  # the next pass tries again

    def woken_by(self, kind: str | None, obj: dict[str, Any] | None) -> None:
        """A change to a gang member (or a relist) ends the wait for the next pass: a gang whose quota gate
        came off, or whose last member arrived, is planned at once, not at the next tick (which stays, for the
        timeouts)."""
        if kind is None or (kind == "Pod" and obj is not None and membership(obj) is not None):
            self.task.wake()

    # -- one pass ------------------------------------------------------------------------------
    def reconcile_once(self) -> list[Action]:
        """One pass; returns what it did (releases and warnings), after the records were stored."""
        if not self.is_leader() or not self.store.loaded:
            return []  # records are made and dropped from the pods the model shows: never from a partial list
        # At least the store as it is now (as the quota controller reads it): the snapshot before the change that woke
        # this pass is replaced only in the background, and nothing woke the pass again, so a gang's last member
        # waited for the next tick (interval_seconds) to be seen. The background rebuild's, waited for, not one forced
        # per pass: admission and the quota pass share it.
        model = self.store.snapshot(at_least=self.store.generation)
        for _attempt in range(PASS_ATTEMPTS):
            current = self.gangs.read()
            records, actions = self.plan(model, current.records)
            changed = records_to_json(records) != records_to_json(current.records)
            if not changed or self.gangs.write(records, current.version):
                break
            # Another writer came first (a replica that also believed it led, during a handover): plan again
            # against its records now, so that a race never puts the releases of this pass off.
        else:
            return []  # lost every attempt: the next pass tries again
        self._export(records, model)
        for action in actions:
            self._apply(action, model)
        return actions

    def plan(self, model: ClusterModel, records: Records) -> tuple[Records, list[Action]]:
        """The records after this pass and the actions that follow from them (no API call is made here)."""
        return plan_gangs(model, records, self.config.gangs, self.clock())

    # -- effects ---------------------------------------------------------------------------------
    def _apply(self, action: Action, model: ClusterModel) -> None:
        record = action.record
        if action.kind == "bound":
            BOUND.inc()
            return
        if action.replanned:
            REPLANS.inc()
        writer = self.writer
        if writer is None:
            return
        if action.kind == "warn":
            for pod in action.pods:
                self._change(record, pod, lambda p: writer.event(
                    p, "GangWaiting", f"gang {record.gang} ({record.size} pods): {record.reason}"))
            return
        room = record.room
        assert room is not None
        pod_group = self._pod_group(record, model)
        if pod_group is False:
            return  # its PodGroup is not there yet: the whole gang stays gated, the next pass tries again
        # Every member is pinned before any gate comes off: a pin that fails (the API server answers 500, the pod
        # changed) leaves the whole gang gated, and the next pass finishes the release from the record. Ungating
        # as each pin succeeded would start the members before it without the one that failed.
        versions: list[str] = []
        for pod in action.pods:
            view = PodView(pod)
            if view.node_selector.get(room.key) == room.value:
                versions.append(view.resource_version)
                continue
            version = self._change(record, pod, lambda p: writer.pin(p, room))
            if version is None:
                log.info("gang %s: not every member could be pinned; no gate removed this pass", record.key)
                return
            versions.append(version)
        together = f"; kube-scheduler binds them all or none (PodGroup {pod_group})" if pod_group else ""
        released = (f"gang {record.gang}: all {record.size} pods start together in {room} "
                    f"({room.key}={room.value}){together}")
        for pod, version in zip(action.pods, versions, strict=True):
            if self._change(record, pod, partial(_ungate, writer, version=version)) is not None:
                self._change(record, pod, lambda p: writer.event(p, "GangReleased", released, "Normal"))
        if action.kind == "release":
            RELEASED.inc()
            log.info("gang %s: %d members released into %s", record.key, len(action.pods), record.room)

    def _pod_group(self, record: GangRecord, model: ClusterModel) -> str | bool | None:
        """Before a release: the gang's PodGroup (and Workload) made ready where members name it. Its name when it
        is, None when no member names it (the classic path: nothing to create), False when it could not be made.

        Members are the ones that name it: a member admitted before the API was served (or with
        `gangs.workloadAPI: off`) joins none, and minCount counts only those that wait for it. Whatever the
        setting says now, a PodGroup members already name is made while the API serves it: they would wait for it."""
        if self.native is None or record.room is None:
            return None
        group = gang_pods(model).get(record.key)
        name = pod_group_name(record.gang)
        joining = [p for p in group.pods if PodView(p).pod_group_name == name] if group is not None else []
        if not joining or group is None:
            return None
        if not served(model):
            # The Workload API went away (its gate turned off): kube-scheduler no longer waits for a PodGroup.
            log.warning("gang %s: members name PodGroup %s but the Workload API is not served; released without it",
                        record.key, name)
            return None
        min_count = min(max(record.size, group.size), len(joining))  # the live members' size is the gang's
        if not self.native.ensure(record.namespace, record.gang, min_count, record.room.key, group.pods):
            return False
        return name

    def _change(self, record: GangRecord, pod: dict[str, Any], call: Callable[[dict[str, Any]], Any]) -> Any:
        """`call(pod)`'s answer, or None when it failed (logged; 404 and 409 quietly: the pod was deleted or
        changed since read, and the next pass sees it). A call that answers None succeeds as True."""
        view = PodView(pod)
        name = f"{view.namespace}/{view.name}"
        try:
            answer = call(pod)
        except api_exception() as exc:
            if exc.status not in (404, 409):
                log.warning("gang %s: pod %s: %s %s", record.key, name, exc.status, exc.reason)
            return None
        except Exception:
            log.exception("gang %s: pod %s could not be changed", record.key, name)
            return None
        return True if answer is None else answer

    def _export(self, records: Records, model: ClusterModel) -> None:
        now = self.clock()
        waiting = [r for r in records.values() if r.released_at is None]
        RECORDS.labels(state="waiting").set(len(waiting))
        RECORDS.labels(state="released").set(len(records) - len(waiting))
        late: dict[tuple[str, ...], float] = {}
        for record in waiting:
            if now - record.created_at > self.config.gangs.wait_warning_seconds:
                late[(record.namespace,)] = late.get((record.namespace,), 0) + 1
        replace_series(WAITING_TOO_LONG, late, stale=0.0)  # a namespace that has none left: 0
        SHORT_GPUS.set(sum(r.short_gpus for r in waiting))

    # -- loop ------------------------------------------------------------------------------------
    def start(self) -> None:
        """Run the `gangs` task alone (under a supervisor, the supervisor starts `task`)."""
        self.task.start()

    def stop(self, timeout: float = 5.0) -> None:
        self.task.stop(timeout)

    def _reconcile_quietly(self) -> None:
        try:
            self.reconcile_once()
        except GangStoreUnavailable as exc:  # expected while the store's backend is away: one line, no trace
            log.warning("gang records unavailable: %s", exc)


def _ungate(writer: PodWriter, pod: dict[str, Any], *, version: str) -> None:
    writer.ungate(pod, version)
