"""What admission says about quotas, holding no state and writing nothing (SPEC section 10).

`/validate` refuses a GPU pod of a tenant with a TenantQuota that does not carry the `kgwe.io/quota` gate
(it would start past the queue), one with `spec.nodeName` set (it would skip the scheduler and the gate),
and one whose ask alone exceeds a limit on every type it may be charged (it could never start). With
`quotas.overQuota: refuse` it also refuses a pod that would wait now. Whether a pod would be released now
is the same question the controller asks, against the same snapshot: `would_wait`.
"""

from __future__ import annotations

from collections.abc import Sequence
from decimal import Decimal
from typing import Any

from policies.quota.model import PodCharge, QuotaLimit
from policies.quota.queue import Ask, Waiter, never_fits, wait_message
from policies.vocabulary.objects import PodView
from webhook.cluster.model import ClusterModel
from webhook.config import Config
from webhook.intent import OUT_ACCELERATOR_TYPE, OUT_TENANT, parse_intent
from webhook.quotas.scheduling_gate import QUOTA_GATE
from webhook.quotas.snapshot_picture import picture_of
from webhook.quotas.waiters import plan_tenant, pod_charges, runnable_types

Problem = tuple[str, str]
ZERO = Decimal(0)


def pod_asks(pod: dict[str, Any], charge: PodCharge, model: ClusterModel, gang_size: int | None) -> list[Ask]:
    """What the pod (or, for a member of a sized gang, the whole gang of pods like it) asks of its quota."""
    view = PodView(pod)
    types = charge.candidate_types if charge.every_candidate else runnable_types(pod, charge.candidate_types, model)
    ask = Ask(
        pod=f"{view.namespace}/{view.name or view.generate_name}", uid=view.uid or None, types=types,
        profile=charge.profile, gpus=charge.gpu_equivalents, memory=charge.gpu_memory_bytes or ZERO,
        every_type=charge.every_candidate, may_run_on=charge.candidate_types,
    )
    return [ask] * (gang_size or 1)


def quota_problems(
    pod: dict[str, Any],
    charge: PodCharge | None,
    tenant: str,
    limits: Sequence[QuotaLimit],
    model: ClusterModel,
    config: Config,
    *,
    gang_size: int | None = None,
) -> list[Problem]:
    """The quota refusals of a pod CREATE whose tenant has TenantQuotas (and is not deferred to Kueue)."""
    view = PodView(pod)
    # Audit mode returns no patch: the gate is missing by design there, and the rest is what it would refuse.
    audit = config.mode == "audit"
    if view.node_name and not audit:
        return [("quota", f"tenant {tenant}: spec.nodeName is set, which would start this GPU pod past the "
                          "scheduler and the tenant's quota; leave spec.nodeName empty and let the scheduler bind it")]
    if QUOTA_GATE not in view.scheduling_gates and not audit:
        return [("quota", f"tenant {tenant}: a GPU pod of a tenant with a TenantQuota waits for its quota behind "
                          f"the scheduling gate {QUOTA_GATE}, which KGWE's mutating webhook adds and only KGWE "
                          "removes; this pod does not carry it (create it through the API server with KGWE's "
                          "mutating webhook installed)")]
    if charge is None:
        return []  # no type or profile to charge: no limit can apply
    asks = pod_asks(pod, charge, model, gang_size)
    if asks and not any(limit_hits(limit, a) for limit in limits for a in asks):
        return []
    why = never_fits(limits, asks)
    if why is not None:
        return [("quota", f"tenant {tenant}: {why}")]
    if config.quotas.over_quota == "refuse":
        waiting = would_wait(model, config, tenant, asks, pod)
        if waiting is not None:
            return [("quota", f"{waiting} (quotas.overQuota: refuse)")]
    return []


def limit_hits(limit: QuotaLimit, ask: Ask) -> bool:
    if limit.key.kind == "profile":
        return limit.key.name == ask.profile
    return limit.key.name in ask.types


def would_wait(model: ClusterModel, config: Config, tenant: str, asks: list[Ask], pod: dict[str, Any]) -> str | None:
    """Why a new pod (or gang) would wait for its tenant's quota now, last in line; None when it would be
    released at once. The same queue the controller runs, on the same snapshot, with this pod added."""
    picture = picture_of(model).tenants.get(tenant)
    if picture is None:
        return None
    me = asks[0].pod
    waiter = Waiter(f"pod {me}", tuple(asks), ("~", me))  # after every pod that exists: it is the newest
    queue = plan_tenant(model, config, picture, extra=waiter, extra_pod=pod)
    for wait in queue.waits:
        if wait.waiter is waiter:
            return wait_message(tenant, wait)
    return None


def queue_answer(model: ClusterModel, config: Config, pod: dict[str, Any]) -> str | None:
    """What `kgwe review` says of a pod `/mutate` gated: `released` now, or `would wait for quota` and why.
    None for a pod the quota gate does not hold."""
    view = PodView(pod)
    if QUOTA_GATE not in view.scheduling_gates:
        return None
    tenant = view.annotation(OUT_TENANT) or ""
    picture = picture_of(model).tenants.get(tenant)
    charge = pod_charges(pod, model)
    if picture is None or charge is None:
        return f"released (tenant {tenant or '?'}: no limit applies to this pod)"
    intent = parse_intent(view)
    asks = pod_asks(pod, charge, model, intent.gang_size if intent.gang else None)
    why = would_wait(model, config, tenant, asks, pod)
    if why is None:
        return f"released (tenant {tenant}: its quota holds this pod now)"
    return f"would wait for quota ({why})"


def answer_ignores_identity(pod: dict[str, Any], asks_gpu: bool, model: ClusterModel) -> bool:
    """Whether `queue_answer` of `pod` is that of the pod without its identity fields (name, uid...), so that
    the replicas of a workload may share it: its charge comes from its GPU resources (`asks_gpu`: its GPU
    demand asks some) and the types KGWE wrote on it, not from DRA claims (which may name the pod), and no
    gated pod of its tenant has its name (the queue looks its pods up by name). Everything else the answer
    reads of the pod is its spec, namespace, labels and annotations."""
    view = PodView(pod)
    if not asks_gpu or not any((view.annotation(OUT_ACCELERATOR_TYPE) or "").split(",")):
        return False
    picture = picture_of(model).tenants.get(view.annotation(OUT_TENANT) or "")
    return picture is None or f"{view.namespace}/{view.name or view.generate_name}" not in picture.pods
