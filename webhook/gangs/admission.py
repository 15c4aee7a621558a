"""The gang record written when `/mutate` admits a gang's first member.

At the CREATE of a member (not a dry run, not in audit mode) the service makes sure the gang has a
record: the first member's admission chooses the best-fit room that has space for all N members,
counting other unbound gangs' promises as used, and records it with compare-and-swap; later members
find the record and change nothing. When no room has space now the record says so and the gang
waits, gated, until the controller finds one. A store that cannot be reached does not fail the pod:
the gate holds it, and the controller plans every gang that has members but no record.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from prometheus_client import Counter

from webhook.admission.facts import Facts
from webhook.gangs.accounting import choose_room, gang_pods
from webhook.gangs.ledger import GangRecord, GangStore, GangStoreUnavailable, Records, update_records
from webhook.gangs.spec import GATE

log = logging.getLogger("kgwe.gangs")

ADMISSIONS = Counter(
    "kgwe_gang_admissions_total",
    "Gang members admitted at /mutate, by what happened to the gang record "
    "(recorded: a room was promised; no-room: recorded without one; joined: the record existed; unavailable)",
    ["result"],
)


class GangService:
    def __init__(self, store: GangStore, clock: Callable[[], float] = time.time) -> None:
        self.store = store
        self.clock = clock

    def admit(self, facts: Facts, pod: dict[str, Any], deadline: float | None) -> list[str]:
        """Record the gang of the mutated `pod` if it has no record yet; returns warnings for the user."""
        plan = facts.plan
        size = facts.intent.gang_size
        if size is None or plan.gang is None or GATE not in plan.scheduling_gates:
            return []
        namespace = facts.request.namespace
        record = GangRecord(
            namespace=namespace,
            gang=plan.gang,
            size=size,
            gpus_per_pod=facts.demand.whole_gpus,
            types=tuple(plan.types),
            room=None,
            created_at=self.clock(),
        )
        outcome: dict[str, GangRecord] = {}

        def change(records: Records) -> Records | None:
            outcome.clear()
            if record.key in records:
                existing = records[record.key]
                outcome["joined"] = existing
                if record.gpus_per_pod <= existing.gpus_per_pod:
                    return None
                # Members may differ (a leader without GPUs, workers with 4): the gang is sized by its largest.
                records[record.key] = replace(existing, gpus_per_pod=record.gpus_per_pod)
                return records
            model = facts.model
            chosen, rooms = choose_room(model, record, pod, records, gang_pods(model))
            if chosen is not None:
                new = replace(record, room=chosen.room.id)
            else:
                reason = "no NVLink room has space for the whole gang now" if rooms else "no NVLink room suits it"
                new = replace(record, reason=reason)
            outcome["new"] = new
            records[record.key] = new
            return records

        try:
            update_records(self.store, change, deadline=deadline)
        except GangStoreUnavailable as exc:
            ADMISSIONS.labels(result="unavailable").inc()
            log.warning("gang %s: record not written (%s); the controller will plan it", record.key, exc)
            return [f"kgwe.io/gang {plan.gang}: the gang record could not be written ({exc}); "
                    "the pod waits gated until KGWE's controller plans the gang"]
        if "joined" in outcome:
            ADMISSIONS.labels(result="joined").inc()
            return []
        new = outcome["new"]
        if new.room is None:
            ADMISSIONS.labels(result="no-room").inc()
            return [f"kgwe.io/gang {plan.gang}: {new.reason}; the pods wait gated (they hold no GPU) until one has"]
        ADMISSIONS.labels(result="recorded").inc()
        log.info("gang %s: %d x %d GPUs promised %s", new.key, new.size, new.gpus_per_pod, new.room)
        return []
