"""The gang controller: ungates a gang only when all of it can start in one room (leader only).

Every `interval_seconds`, from a store snapshot and the gang records:

- a gang with fewer members than `kgwe.io/gang-size` waits gated; past `gangs.timeoutSeconds` its
  promise stops counting (other gangs may take the room) and it is planned afresh when complete;
- a complete gang is checked against its room: free GPUs minus what older or released gangs were
  promised. Without space it is re-planned into the best-fit room that has space (counting every
  other promise), or waits with the reason (which room, how many GPUs short);
- a gang that fits is released: the record says so first (the commit point), then every gated member
  is pinned to the room (`spec.nodeSelector` gains the room's label: an addition, which Kubernetes
  allows while a pod is gated) and its `kgwe.io/gang` gate is removed, each with the resourceVersion
  read so a concurrent change is never overwritten; an interrupted release is finished next pass;
- a gang waiting longer than `gangs.waitWarningSeconds` gets an Event on its gated members;
- a record is dropped when its gang is bound fully, when its pods are gone, or when a released gang
  has not bound fully within `gangs.timeoutSeconds`.

Members are the live pods of the gang (`gang_pods`: never a finished or terminating pod). A release
covers the members it was decided for (created no later than the newest of them, by the API server's
clock) and only while the gang is still whole: a gated pod of a new run of the gang (a job restarted
under the same name), or a gang that lost a member before every gate came off, waits again as a new gang.

Members are never pinned before the release, so a waiting gang can move to any room: KEP-3838 lets a
gated pod's node constraints only grow, and a pin is the one growth made, once.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from functools import partial
from typing import Any, Protocol

from kubernetes.client.exceptions import ApiException
from prometheus_client import Counter, Gauge

from policies.background import Task
from policies.gpu_demand import pod_gpu_demand
from policies.metrics import replace_series
from policies.vocabulary.keys import QUOTA_GATE
from policies.vocabulary.objects import PodView, objects
from webhook.cluster.model import ClusterModel, ClusterStore
from webhook.config import Config
from webhook.gangs.accounting import (
    GangPods,
    candidate_rooms,
    choose_room,
    gang_pods,
    older_or_released,
    promised_gpus,
    room_of_bound,
)
from webhook.gangs.ledger import MAX_RECORDS, GangRecord, GangStore, GangStoreUnavailable, Records, records_to_json
from webhook.gangs.rooms import RoomId, fit, free_gpus
from webhook.gangs.spec import GATE, created, membership, parse_timestamp
from webhook.intent import OUT_ACCELERATOR_TYPE

log = logging.getLogger("kgwe.gangs.controller")

# A record whose pods the model does not show yet (the watch lags the admission) is kept this long. Short:
# /mutate writes the record before the API server has accepted the pod, so a pod that is then refused (by
# /validate, a quota, a name already taken) leaves a record with no member, which holds its room meanwhile;
# pods created in a flood under new gang names must not keep every room promised. A record dropped before
# its pods showed up only means the gang is planned again when they do (gated, so nothing runs meanwhile).
NEW_RECORD_GRACE_SECONDS = 10.0
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


@dataclass(frozen=True)
class Action:
    record: GangRecord
    pods: list[dict[str, Any]]
    kind: str  # release | warn | bound (the record was dropped: the gang is bound fully)
    replanned: bool = False  # a release into another room than the one the gang was promised


def kube_pod_writer(api_client: Any) -> PodWriter:
    from webhook.cluster.kube_json import KubeJson

    return _KubePodWriter(KubeJson(api_client))


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
    ) -> None:
        self.store = store
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
        if not self.is_leader():
            return []
        model = self.store.snapshot()
        for _attempt in range(PASS_ATTEMPTS):
            current = self.gangs.read()
            records, actions = self.plan(model, current.records)
            changed = records_to_json(records) != records_to_json(current.records)
            if not changed or self.gangs.write(records, current.version):
                break
            # Another writer (an admission of a new gang's first member) came first: plan again against its
            # records now, so that a steady stream of admissions cannot put every release off pass after pass.
        else:
            return []  # lost every attempt: the next pass tries again
        self._export(records, model)
        for action in actions:
            self._apply(action)
        return actions

    def plan(self, model: ClusterModel, records: Records) -> tuple[Records, list[Action]]:
        """The records after this pass and the actions that follow from them (no API call is made here)."""
        now = self.clock()
        settings = self.config.gangs
        members = gang_pods(model)
        out: Records = dict(records)
        actions: list[Action] = []
        for key, record in records.items():
            settled = record.released_at is not None or now - record.created_at > NEW_RECORD_GRACE_SECONDS
            if key not in members and settled:
                del out[key]  # every member deleted (or finished)
        for key in sorted(members, key=lambda k: (records[k].created_at, k) if k in records else (now, k)):
            group = members[key]
            gated = group.gated
            if key not in out and gated and len(out) >= MAX_RECORDS and len(group.pods) >= group.size:
                _evict_lapsed(out, members, now, settings.timeout_seconds)
            if key not in out and (not gated or len(out) >= MAX_RECORDS):
                continue  # nothing to hold back, or the ledger is full: the gang stays gated until there is room
            record = out.get(key) or _new_record(key, group, now)
            if not gated:
                # A released gang is done when every live member is bound (one that finished or was deleted since
                # the release will never be placed); any other when `size` members are.
                bound = not group.unbound if record.released_at is not None else len(group.bound) >= record.size
                # Ungated but not bound fully for too long (released and unschedulable, or a gate removed by
                # someone else): the record stops promising anything.
                stuck = now - (record.released_at or record.created_at) > settings.timeout_seconds
                if (bound or stuck) and key in out:
                    del out[key]
                    if bound:
                        actions.append(Action(record, [], "bound"))
                continue
            if record.released_at is not None:
                covered = covered_by_release(record, group)
                if covered:  # an interrupted release: finish it, never re-planned
                    actions.append(Action(record, covered, "release"))
                    continue
                record = _waiting_again(record, group, now)
            promised = record.room
            record = self._plan_waiting(model, record, group, out, members, now)
            out[key] = record
            if record.released_at is not None:
                out[key] = record = replace(record, released_upto=_newest_creation(group.pods))
                actions.append(Action(record, gated, "release", replanned=record.room != promised))
            elif now - record.created_at > settings.wait_warning_seconds and not record.warned:
                out[key] = record = replace(record, warned=True)
                actions.append(Action(record, gated, "warn"))
        return out, actions

    def _plan_waiting(
        self,
        model: ClusterModel,
        record: GangRecord,
        group: GangPods,
        records: Records,
        members: dict[str, GangPods],
        now: float,
    ) -> GangRecord:
        present = len(group.pods)
        # The live members say how big the gang is: a run re-created with another size, or a member whose claim
        # is larger than the one the record was written from, is waited for whole.
        size = group.size
        if record.size != size:
            record = replace(record, size=size)
        if any(QUOTA_GATE in PodView(p).scheduling_gates for p in group.pods):
            # The tenant's quota releases the gang first, whole (webhook/quotas): until then it holds no room, so a
            # gang waiting for quota (or for members) never keeps another gang out of a clique.
            missing = f"{present} of {size} members exist; " if present < size else ""
            return replace(record, room=None, reason=f"{missing}waiting for the tenant's quota (kgwe.io/quota)",
                           short_gpus=0)
        if present < size:
            reason = f"{present} of {size} members exist"
            expired = record.expired or now - record.created_at > self.config.gangs.timeout_seconds
            if expired:
                reason += f"; waiting over {self.config.gangs.timeout_seconds:.0f}s, its room is no longer held"
            return replace(record, reason=reason, expired=expired, short_gpus=0)
        # Complete: the gang claims its room again (an expired promise is renewed), sized by its largest member.
        if record.expired:
            # Its promise lapsed and others may have been promised the room since: it queues as a new gang (its age
            # from now), so it never counts as older than they are and takes their room.
            record = replace(record, created_at=now, warned=False)
        largest = max(pod_gpu_demand(p).whole_gpus for p in group.pods)
        record = replace(record, expired=False, gpus_per_pod=max(record.gpus_per_pod, largest))
        needed = size - len(group.bound)
        free = free_gpus(model)
        gpus = record.gpus_per_pod
        sample = group.gated[0]
        joined = room_of_bound(model, candidate_rooms(model, record, group.pods), group)
        if joined is not None and record.room != joined.id:
            record = replace(record, room=joined.id)  # members already run there: the rest must follow
        if record.room is not None:
            before = promised_gpus(records, members, exclude=record.key, counts=older_or_released(record))
            room = next((r for r in candidate_rooms(model, record, group.pods) if r.id == record.room), None)
            if room is not None:
                found = fit(room, gpus, needed, free, before.get(room.id, 0))
                if found.fits:
                    return replace(record, released_at=now, reason="", short_gpus=0)
        # Re-plan: the best room with space for the whole gang, every other promise counted; a gang with
        # members bound already (a replaced worker) can only go where they are.
        chosen, rooms = choose_room(model, record, sample, records, members)
        others = promised_gpus(records, members, exclude=record.key)
        if chosen is not None:
            if record.room != chosen.room.id:  # counted when the release is applied (a lost pass counts nothing)
                log.info("gang %s: re-planned from %s to %s", record.key, record.room, chosen.room.id)
            return replace(record, room=chosen.room.id, released_at=now, reason="", short_gpus=0)
        if record.room is not None:
            room = next((r for r in rooms if r.id == record.room), None)
            if room is not None:
                short = fit(room, gpus, needed, free, others.get(room.id, 0)).short_gpus(gpus)
                reason = f"{room.id} is {short} GPUs short for {needed} pods x {gpus} GPUs"
                return replace(record, reason=reason, short_gpus=short)
        if not rooms:
            return replace(record, room=None, reason="no NVLink room of its types could hold it", short_gpus=0)
        closest = min(rooms, key=lambda r: fit(r, gpus, needed, free, others.get(r.id, 0)).short_gpus(gpus))
        short = fit(closest, gpus, needed, free, others.get(closest.id, 0)).short_gpus(gpus)
        reason = f"no NVLink room has {needed * gpus} GPUs free; the closest, {closest.id}, is {short} GPUs short"
        return replace(record, room=closest.id, reason=reason, short_gpus=short)

    # -- effects ---------------------------------------------------------------------------------
    def _apply(self, action: Action) -> None:
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
        for pod, version in zip(action.pods, versions, strict=True):
            if self._change(record, pod, partial(_ungate, writer, version=version)) is not None:
                self._change(record, pod, lambda p: writer.event(
                    p, "GangReleased", f"gang {record.gang}: all {record.size} pods start together "
                    f"in {room} ({room.key}={room.value})", "Normal"))
        if action.kind == "release":
            RELEASED.inc()
            log.info("gang %s: %d members released into %s", record.key, len(action.pods), record.room)

    def _change(self, record: GangRecord, pod: dict[str, Any], call: Callable[[dict[str, Any]], Any]) -> Any:
        """`call(pod)`'s answer, or None when it failed (logged; 404 and 409 quietly: the pod was deleted or
        changed since read, and the next pass sees it). A call that answers None succeeds as True."""
        view = PodView(pod)
        name = f"{view.namespace}/{view.name}"
        try:
            answer = call(pod)
        except ApiException as exc:
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


def covered_by_release(record: GangRecord, group: GangPods) -> list[dict[str, Any]]:
    """The gated members a committed release still has to ungate: those it was decided for, and only while the
    gang is whole. Empty when the gated pods belong to a new run of the gang (created after the newest member
    the release saw) or a member is gone (ungating the rest would start part of a gang)."""
    if len(group.pods) < max(record.size, group.size):
        return []
    upto = parse_timestamp(record.released_upto)
    if upto is None:  # a record written before the field existed, or members without creationTimestamp
        return group.gated
    out = []
    for pod in group.gated:
        stamp = created(pod)
        if stamp is None or stamp <= upto:
            out.append(pod)
    return out


def _evict_lapsed(records: Records, members: dict[str, GangPods], now: float, timeout: float) -> None:
    """Make room in a full ledger for a complete gang: drop the oldest record of an incomplete gang whose promise
    lapsed (it holds nothing; it only keeps its age). Else a tenant filling the ledger with gangs that never
    complete would wedge every other tenant's gang that found no record, for as long as those pods exist. The
    dropped gang stays gated, and is recorded again when the ledger has room."""
    lapsed = [
        record for key, record in records.items()
        if record.released_at is None
        and (record.expired or now - record.created_at > timeout)
        and (key not in members or len(members[key].pods) < members[key].size)
    ]
    if lapsed:
        oldest = min(lapsed, key=lambda r: (r.created_at, r.key))
        log.info("gang records full: %s (incomplete, its promise lapsed) makes room for a complete gang", oldest.key)
        del records[oldest.key]


def _ungate(writer: PodWriter, pod: dict[str, Any], *, version: str) -> None:
    writer.ungate(pod, version)


def _waiting_again(record: GangRecord, group: GangPods, now: float) -> GangRecord:
    """A released record whose release covers none of the gated members: the gang waits again as a new gang
    (its room kept as the first choice, its age, timeout and warning counted afresh)."""
    log.info("gang %s: its release covers none of its %d gated members; it waits again", record.key, len(group.gated))
    return replace(record, size=group.size, released_at=None, released_upto=None, created_at=now, expired=False,
                   reason="", short_gpus=0, warned=False)


def _newest_creation(pods: list[dict[str, Any]]) -> str | None:
    """The newest creationTimestamp of `pods`, as the API server wrote it; None when one lacks it (then the
    release covers every gated member, as before the field existed)."""
    newest: tuple[datetime, str] | None = None
    for pod in pods:
        stamp = created(pod)
        if stamp is None:
            return None
        if newest is None or stamp > newest[0]:
            newest = (stamp, PodView(pod).creation_timestamp)
    return newest[1] if newest is not None else None


def _new_record(key: str, group: GangPods, now: float) -> GangRecord:
    """A record for a gang admission did not record (the store was down, or it expired and came back)."""
    sample = group.pods[0]  # every member carries the types admission chose for the gang
    namespace, gang = key.split("/", 1)
    types = tuple(t for t in (PodView(sample).annotation(OUT_ACCELERATOR_TYPE) or "").split(",") if t)
    return GangRecord(
        namespace=namespace,
        gang=gang,
        size=group.size,
        gpus_per_pod=max(pod_gpu_demand(p).whole_gpus for p in group.pods),
        types=types,
        room=None,
        created_at=now,
    )
