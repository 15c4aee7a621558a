"""What `/mutate` says about a gang member's room: read-only, from the cluster model.

Admission writes no gang record: a request that no pod follows (refused later, a forged review) must change
nothing, so the leader's gang controller records a gang once it sees its members in the API
(webhook/gangs/controller.py). At the CREATE of a gated member this only warns the user when no NVLink room
of the gang's types suits the pod, or none has space for the gang's members not yet bound now (free GPUs;
promises to other gangs live in the records, which admission does not read).
"""

from __future__ import annotations

from typing import Any

from webhook.admission.facts import Facts
from webhook.gangs.accounting import candidate_rooms, gang_pods
from webhook.gangs.ledger import GangRecord
from webhook.gangs.rooms import best_fit, free_gpus
from webhook.gangs.spec import GATE


class GangAdvice:
    """The gang warnings of `/mutate`; it keeps nothing and writes nothing."""

    def warnings(self, facts: Facts, pod: dict[str, Any]) -> list[str]:
        """Warnings for the user about the gang of the mutated `pod` (none when a room has space now)."""
        plan = facts.plan
        size = facts.intent.gang_size
        if size is None or plan.gang is None or GATE not in plan.scheduling_gates:
            return []
        model = facts.model
        group = gang_pods(model).get(f"{facts.request.namespace}/{plan.gang}")
        gpus = facts.demand.whole_gpus  # this member's: the controller sizes the gang by its largest member
        gang = GangRecord(namespace=facts.request.namespace, gang=plan.gang, size=size, gpus_per_pod=gpus,
                          types=tuple(plan.types), room=None, created_at=0.0)
        rooms = candidate_rooms(model, gang, [pod])
        if not rooms:
            return [f"kgwe.io/gang {plan.gang}: no NVLink room suits it; the pods wait gated (they hold no GPU)"]
        needed = size - (len(group.bound) if group is not None else 0)
        if best_fit(rooms, gpus, needed, free_gpus(model), {}) is None:
            return [f"kgwe.io/gang {plan.gang}: no NVLink room has space for the whole gang now; the pods wait "
                    "gated (they hold no GPU) until one has"]
        return []

