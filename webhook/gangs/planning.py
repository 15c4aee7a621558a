"""The gang plan: the records every gang of a cluster model should have, and what follows from them.

Pure: a model and the records read in, the records to store and the actions to take out; no API call, no
clock of its own. The leader's controller (`controller`) stores the answer with compare-and-swap and acts
on it; the views of a YAML cluster directory (`view`), which keep no records, plan from no records on
every call.

Records are made here only, from pods that exist: a gang is recorded when the model first shows a gated
member of it. No admission request writes one, so a request that no pod follows changes nothing.

- a new gang is recorded with the best-fit room that has space for all N members (every other promise
  counted as used), even when only some members exist yet: its promise; when none has space the record
  has no room and the gang waits. New gangs of one pass are recorded in the order their first members
  were created (the API server's clock), so the first to arrive is promised first;
- a gang with fewer members than `kgwe.io/gang-size` waits gated; past `gangs.timeoutSeconds` its
  promise stops counting (other gangs may take the room) and it is planned afresh when complete;
- a complete gang is checked against its room: free GPUs minus what older or released gangs were
  promised. Without space it is re-planned into the best-fit room that has space (counting every
  other promise), or waits with the reason (which room, how many GPUs short);
- a gang that fits is released: the record says so (the commit point), and the action lists the gated
  members to pin and ungate; a release the record says was committed is finished, never re-planned;
- a gang waiting longer than `gangs.waitWarningSeconds` gets a warning action, once per wait;
- a record is dropped when its gang is bound fully, when it has no live member left, or when a released
  gang has not bound fully within `gangs.timeoutSeconds`.

Members are the live pods of the gang (`gang_pods`: never a finished or terminating pod). A release
covers the members it was decided for (created no later than the newest of them, by the API server's
clock) and only while the gang is still whole: a gated pod of a new run of the gang (a job restarted
under the same name), or a gang that lost a member before every gate came off, waits again as a new gang.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from policies.gpu_demand import pod_gpu_demand
from policies.vocabulary.keys import QUOTA_GATE
from policies.vocabulary.objects import PodView
from webhook.cluster.model import ClusterModel
from webhook.gang_spec import created, parse_timestamp
from webhook.gangs.accounting import (
    GangPods,
    candidate_rooms,
    choose_room,
    gang_pods,
    older_or_released,
    promised_gpus,
    room_of_bound,
)
from webhook.gangs.ledger import MAX_RECORDS, GangRecord, Records
from webhook.intent import OUT_ACCELERATOR_TYPE
from webhook.placement.free_gpus import free_gpus
from webhook.placement.rooms import fit
from webhook.wing_config import Gangs

log = logging.getLogger("kgwe.gangs.planning")


@dataclass(frozen=True)
class Action:
    record: GangRecord
    pods: list[dict[str, Any]]
    kind: str  # release | warn | bound (the record was dropped: the gang is bound fully)
    replanned: bool = False  # a release into another room than the one the gang was promised


def plan_gangs(model: ClusterModel, records: Records, settings: Gangs, now: float) -> tuple[Records, list[Action]]:
    """The records after a pass over `model` and the actions that follow from them. `now`: seconds since the
    epoch (replicas share wall-clock time)."""
    members = gang_pods(model)
    out: Records = dict(records)
    actions: list[Action] = []
    for key in records:
        if key not in members:
            del out[key]  # every member deleted (or finished): records are kept only for pods that exist
    for key in sorted(members, key=lambda k: _queue_position(k, records, members, now)):
        group = members[key]
        gated = group.gated
        if key not in out and gated and len(out) >= MAX_RECORDS and len(group.pods) >= group.size:
            _evict_lapsed(out, members, now, settings.timeout_seconds)
        if key not in out and (not gated or len(out) >= MAX_RECORDS):
            continue  # nothing to hold back, or the ledger is full: the gang stays gated until there is room
        new = key not in out
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
        record = _plan_waiting(model, record, group, out, members, settings, now, new=new)
        out[key] = record
        if record.released_at is not None:
            out[key] = record = replace(record, released_upto=_newest_creation(group.pods))
            moved = promised is not None and record.room != promised
            actions.append(Action(record, gated, "release", replanned=moved))
        elif now - record.created_at > settings.wait_warning_seconds and not record.warned:
            out[key] = record = replace(record, warned=True)
            actions.append(Action(record, gated, "warn"))
    return out, actions


def planned_records(model: ClusterModel, settings: Gangs, now: float) -> Records:
    """The records of a model that keeps none (a YAML cluster directory): planned from nothing, as the
    controller records gangs it sees for the first time. Nothing is stored; every call plans afresh."""
    records, _actions = plan_gangs(model, {}, settings, now)
    return records


def _queue_position(key: str, records: Records, members: dict[str, GangPods], now: float) -> tuple[float, float, str]:
    """Recorded gangs by their age; gangs not recorded yet after them, by when their first member was created."""
    if key in records:
        return (records[key].created_at, 0.0, key)
    stamps = [stamp.timestamp() for stamp in (created(p) for p in members[key].pods) if stamp is not None]
    return (now, min(stamps) if stamps else math.inf, key)


def _plan_waiting(
    model: ClusterModel,
    record: GangRecord,
    group: GangPods,
    records: Records,
    members: dict[str, GangPods],
    settings: Gangs,
    now: float,
    *,
    new: bool,
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
    largest = max(pod_gpu_demand(p).whole_gpus for p in group.pods)
    if present < size:
        reason = f"{present} of {size} members exist"
        expired = record.expired or now - record.created_at > settings.timeout_seconds
        if expired:
            reason += f"; waiting over {settings.timeout_seconds:.0f}s, its room is no longer held"
        # Members may differ (a leader without GPUs, workers with 4): the gang is sized by its largest so far.
        record = replace(record, reason=reason, expired=expired, short_gpus=0,
                         gpus_per_pod=max(record.gpus_per_pod, largest))
        if new:
            # Its first members exist: the gang is promised the room it will start in, so that gangs recorded
            # after it cannot fill that room while its other members are being created.
            chosen, _rooms = choose_room(model, record, group.pods[0], records, members)
            if chosen is not None:
                record = replace(record, room=chosen.room.id)
        return record
    # Complete: the gang claims its room again (an expired promise is renewed), sized by its largest member.
    if record.expired:
        # Its promise lapsed and others may have been promised the room since: it queues as a new gang (its age
        # from now), so it never counts as older than they are and takes their room.
        record = replace(record, created_at=now, warned=False)
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
        if record.room is not None and record.room != chosen.room.id:  # counted when the release is applied
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
    """The record of a gang seen for the first time, from its live members."""
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
