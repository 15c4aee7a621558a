"""What `kgwe gangs`, `GET /api/v1/gangs` and the web page show: every gang, its members and why it waits.

Rows come from the pods of the cluster model (members present, bound, gated) joined with the gang
records (chosen room, waiting reason): in a cluster those the leader's controller keeps in the GangLedger,
over a YAML cluster directory (which keeps none) those planned from its pods for this view
(`planning.planned_records`). A gated gang without a record yet shows as waiting for the controller's next
pass; a record whose members the model no longer shows (pods just deleted) shows with zero members.
"""

from __future__ import annotations

import time
from typing import Any

from policies.vocabulary.objects import PodView
from webhook.cluster.model import ClusterModel
from webhook.gang_spec import membership
from webhook.gangs.accounting import gang_pods
from webhook.gangs.ledger import Records
from webhook.gangs.planning import planned_records
from webhook.wing_config import Gangs


def gangs_view(
    model: ClusterModel, records: Records, now: float | None = None, *, recorded: bool = True
) -> dict[str, Any]:
    """`recorded`: False when `records` were planned for this view (nothing waited: no waiting time shown)."""
    moment = time.time() if now is None else now
    members = gang_pods(model)
    rows = []
    for key in sorted(set(members) | set(records)):
        group = members.get(key)
        record = records.get(key)
        namespace, gang = key.split("/", 1)
        size = record.size if record else (group.size if group else 0)
        present = len(group.pods) if group else 0
        bound = len(group.bound) if group else 0
        gated = len(group.gated) if group else 0
        if record is not None and record.released_at is not None:
            state, reason = "Released", ""
        elif record is not None:
            state, reason = "Waiting", record.reason or (
                f"{present} of {size} members exist" if present < size else "waiting for the controller"
            )
        elif gated:
            state, reason = "Waiting", "no record yet: the controller plans it on its next pass"
        else:
            state, reason = ("Bound" if bound >= size else "Scheduling"), ""
        rows.append({
            "namespace": namespace,
            "gang": gang,
            "size": size,
            "gpusPerPod": record.gpus_per_pod if record else None,
            "present": present,
            "bound": bound,
            "gated": gated,
            "room": str(record.room) if record and record.room else None,
            "roomSelector": record.room.as_json() if record and record.room else None,
            "state": state,
            "reason": reason,
            "shortGPUs": record.short_gpus if record else 0,
            "waitingSeconds": (round(moment - record.created_at)
                               if recorded and record and record.released_at is None else None),
            # The PodGroup (native gang scheduling) the members join: KGWE's, or their controller's; None when none.
            "podGroup": _pod_group(group.pods) if group else None,
        })
    return {"gangs": rows}


def _pod_group(pods: list[dict[str, Any]]) -> str | None:
    return next((name for name in (PodView(p).pod_group_name for p in pods) if name), None)


def why_gang_waits(model: ClusterModel, settings: Gangs, pod: dict[str, Any], now: float | None = None) -> str | None:
    """Why the gang of this gated member waits now, as the controller plans it from the pods of `model` (in a
    cluster the leader's records may have promised rooms in another order: `kgwe gangs` shows those); None for
    a pod of no sized gang."""
    member = membership(pod)
    if member is None:
        return None
    group = gang_pods(model).get(member.key)
    present = len(group.pods) if group else 0
    record = planned_records(model, settings, time.time() if now is None else now).get(member.key)
    head = f"gang {member.gang}, {present} of {member.size} pods"
    if record is None:
        return f"{head}: not planned yet"
    if record.released_at is not None:
        return f"{head}: its room has space for all of them now; KGWE's gang controller removes the gate"
    return f"{head}: {record.reason or 'waiting for the controller'}"
