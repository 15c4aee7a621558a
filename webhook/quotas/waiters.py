"""The quota picture of one cluster snapshot: per tenant, what its released pods use and which pods wait.

Read from the pods that exist (SPEC section 10): a pod that is not terminal and not gated by `kgwe.io/quota`
holds quota; a gated one waits. A pod the controller released moments ago, which the snapshot still shows
gated (the watch lags the write), is passed in as `in_flight` and counted released, on the type it was
pinned to. A waiting pod may be charged only the types it can run on: the types KGWE wrote on it
(`kgwe.io/accelerator-type`, in the user's order), narrowed to those with a node its own nodeSelector,
required node affinity and tolerations allow.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from decimal import Decimal
from typing import Any

from policies.quota.model import PodCharge, QuotaLimit, charge_belongs_to, quota_limits, tenant_of_quota
from policies.quota.queue import Ask, TenantQueue, Waiter, plan_queue
from policies.vocabulary.objects import PodView
from webhook.cluster.claim_charging import CLAIM_CHARGING, ClaimCharges
from webhook.cluster.device_classes import mapped_resources
from webhook.cluster.model import ClusterModel
from webhook.config import Config
from webhook.gang_spec import membership
from webhook.intent import OUT_TENANT
from webhook.placement.free_gpus import free_gpus
from webhook.quota_charges import pod_charge
from webhook.quotas.scheduling_gate import is_quota_gated
from webhook.scheduling.predicates import first_feasible

ZERO = Decimal(0)


@dataclass
class GatedPod:
    pod: dict[str, Any]
    ask: Ask
    tenant: str | None  # kgwe.io/tenant as written at admission


@dataclass
class TenantPicture:
    tenant: str
    quotas: list[dict[str, Any]]
    limits: list[QuotaLimit]
    released: list[PodCharge] = field(default_factory=list)
    waiters: list[Waiter] = field(default_factory=list)
    incomplete: list[tuple[Waiter, str]] = field(default_factory=list)  # gangs missing members: why
    pods: dict[str, dict[str, Any]] = field(default_factory=dict)  # namespace/name -> gated pod


@dataclass
class QuotaPicture:
    tenants: dict[str, TenantPicture]
    unlimited: list[dict[str, Any]]  # gated pods of tenants without a TenantQuota: nothing holds them
    # Every pod of the snapshot as read, by namespace/name, terminal ones too (the controller forgets what it
    # released and told pods that are gone or no longer gated from these, without reading every pod again);
    # empty in admission's picture of a snapshot (webhook/quotas/snapshot_picture.py `picture_of`).
    read: Mapping[str, PodRead] = field(default_factory=dict, compare=False, repr=False)


def runnable_types(pod: dict[str, Any], types: tuple[str, ...], model: ClusterModel) -> tuple[str, ...]:
    """`types` narrowed to those with a node the pod's own constraints allow (resources not counted: a pod too
    big for every node of a type is refused at admission). All of them when none is left: a pod that no node
    can run is charged as admitted, never freed of its quota by a guess."""
    kept = tuple(
        t for t in types
        if t in model.types and first_feasible(_without_resources(pod), (model.nodes[n] for n in model.types[t].nodes))
    )
    return kept or types


def _without_resources(pod: dict[str, Any]) -> dict[str, Any]:
    spec = pod.get("spec") if isinstance(pod.get("spec"), dict) else {}
    assert isinstance(spec, dict)
    kept = {k: spec[k] for k in ("nodeSelector", "affinity", "tolerations") if k in spec}
    return {"spec": kept}


def has_capacity(model: ClusterModel, waiter: Waiter, type_id: str, pods: Mapping[str, dict[str, Any]],
                 free_of: Callable[[ClusterModel], Mapping[str, int]] = free_gpus) -> bool:
    """Every member of `waiter` has a node of `type_id` it can run on with its whole GPUs free now (`free_of`:
    the free GPUs per schedulable node, placement's count, however the caller keeps it)."""
    free = free_of(model)
    for ask in waiter.asks:
        pod = pods.get(ask.pod)
        if pod is None or type_id not in model.types:
            return False
        nodes = [model.nodes[n] for n in model.types[type_id].nodes if free.get(n, 0) >= ask.gpus]
        if first_feasible(_without_resources(pod), nodes) is None:
            return False
    return True


def _order(pod: dict[str, Any]) -> tuple[str, str]:
    view = PodView(pod)
    return (view.creation_timestamp or "", f"{view.namespace}/{view.name}")


@dataclass(frozen=True, slots=True)
class PodRead:
    """What a pass reads of one pod object, kept while the snapshot holds the same object (the store never
    changes one in place): a pass over 150,000 pods of which ten changed reads ten (issue 36)."""

    pod: dict[str, Any]  # held, so the identity it is remembered by is not reused by another object
    terminal: bool
    node_name: str
    uid: str
    gated: bool
    deleting: bool
    claims: bool  # names ResourceClaims of its own: its charges follow the claims, read every pass
    # The facts of the node `charges` were read against (None: on no known node, where the types' sharing
    # modes may price it before binding).
    node: object = None
    charges: tuple[PodCharge, ...] | None = None
    # Which tenants' pictures each of `charges` counts in (pairs of charge index and tenant), read against the
    # TenantQuota objects `owners_for` names.
    owners: tuple[tuple[int, str], ...] = ()
    owners_for: tuple[tuple[str, tuple[int, ...]], ...] | None = None


def read_pod(pod: dict[str, Any]) -> PodRead:
    """What a pass reads of the pod itself (its charges are `charged`'s)."""
    view = PodView(pod)
    return PodRead(pod, view.terminal, view.node_name, view.uid, is_quota_gated(view), view.deleting,
                   bool(view.spec.get("resourceClaims")))


def charged(read: PodRead, model: ClusterModel, mapped: Mapping[str, str], claim_usage: Callable[[], ClaimCharges],
            tenants: Mapping[str, TenantPicture], owners_for: tuple[tuple[str, tuple[int, ...]], ...] | None,
            ) -> PodRead:
    """The read of a pod that is not finished with its charges on this snapshot and the tenants they count in."""
    node = model.nodes.get(read.node_name) if read.node_name else None
    charges = tuple(charges_of(read.pod, model, mapped, claim_usage))
    return replace(read, node=node, charges=charges, owners=owners_of(charges, tenants), owners_for=owners_for)


def quota_picture(model: ClusterModel, in_flight: Mapping[str, str | None] | None = None) -> QuotaPicture:
    """Every tenant with a TenantQuota: its released pods' charges and its waiters in order, from every pod.

    `in_flight`: uid -> the type pinned, for pods the controller released that the snapshot may show gated.
    Every list of the answer is in pod-key order, whatever order the snapshot holds its pods in, so this full
    computation and the kept ones (webhook/quotas/incremental.py for the controller, snapshot_picture.py for
    admission and the views) give equal pictures and sum the same charges in the same order."""
    in_flight = in_flight or {}
    tenants = tenant_pictures(model)
    mapped = mapped_resources(model.device_classes)
    claim_usage = claim_usage_of(model, mapped)
    quotas_read = tuple((tenant, tuple(id(q) for q in picture.quotas)) for tenant, picture in tenants.items())
    released: dict[str, list[tuple[str, int, PodCharge]]] = {}
    gated: list[tuple[str, GatedPod]] = []
    unlimited: list[tuple[str, dict[str, Any]]] = []
    every: dict[str, PodRead] = {}
    for key, pod in model.pods.items():
        read = read_pod(pod)
        if not read.terminal:
            read = charged(read, model, mapped, claim_usage, tenants, quotas_read)
        every[key] = read
        if read.terminal:
            continue
        place(key, read, tenants, in_flight, released, gated, unlimited, model)
    return assemble(tenants, released, gated, unlimited, model, _live_gang_members, every)


def tenant_pictures(model: ClusterModel) -> dict[str, TenantPicture]:
    """An empty picture for every tenant with a TenantQuota, its quotas in name order."""
    by_tenant: dict[str, list[dict[str, Any]]] = {}
    for quota in sorted(model.tenant_quotas.values(), key=lambda q: PodView(q).name):
        by_tenant.setdefault(tenant_of_quota(quota), []).append(quota)
    return {
        tenant: TenantPicture(tenant, quotas, [limit for q in quotas for limit in quota_limits(q)])
        for tenant, quotas in by_tenant.items()
    }


def claim_usage_of(model: ClusterModel, mapped: Mapping[str, str]) -> Callable[[], ClaimCharges]:
    """The snapshot's claim charges, made once, and only when some pod names claims of its own."""
    made: list[ClaimCharges] = []

    def claim_usage() -> ClaimCharges:
        if not made:
            made.append(CLAIM_CHARGING.value.claim_charges(model, mapped))
        return made[0]

    return claim_usage


def owners_of(charges: tuple[PodCharge, ...], tenants: Mapping[str, TenantPicture]) -> tuple[tuple[int, str], ...]:
    """Which tenants' pictures each charge counts in, as pairs of charge index and tenant."""
    return tuple((i, picture.tenant) for i, charge in enumerate(charges) for picture in tenants.values()
                 if charge_belongs_to(charge, picture.tenant, picture.quotas))


def place(
    key: str, read: PodRead, tenants: Mapping[str, TenantPicture], in_flight: Mapping[str, str | None],
    released: dict[str, list[tuple[str, int, PodCharge]]], gated: list[tuple[str, GatedPod]],
    unlimited: list[tuple[str, dict[str, Any]]], model: ClusterModel,
) -> None:
    """Where one unfinished pod, read with its charges and owners, goes in the picture: its charges to the
    tenants it counts for when it holds quota (or was released moments ago), else it waits, for its tenant's
    quota or, without one, for nothing."""
    assert read.charges is not None
    found = list(read.charges)
    waiting = read.gated and read.uid not in in_flight and not read.deleting
    if read.uid in in_flight and read.gated:
        pinned = in_flight[read.uid]
        found = [replace(c, candidate_types=(pinned,)) if pinned and not c.every_candidate else c for c in found]
    if not waiting:
        for index, owner in read.owners:  # a pinned in-flight charge belongs where its unpinned one does
            released.setdefault(owner, []).append((key, index, found[index]))
        return
    pod = read.pod
    view = PodView(pod)  # a waiting pod: a few of all
    tenant = view.annotation(OUT_TENANT)
    if tenant not in tenants or not found:
        unlimited.append((key, pod))
        return
    for charge in found[:1] if len(found) == 1 else [_merged(found)]:
        types = charge.candidate_types if charge.every_candidate else runnable_types(
            pod, charge.candidate_types, model)
        ask = Ask(
            pod=f"{view.namespace}/{view.name}", uid=view.uid or None, types=types, profile=charge.profile,
            gpus=charge.gpu_equivalents, memory=charge.gpu_memory_bytes or ZERO, every_type=charge.every_candidate,
            may_run_on=charge.candidate_types,
        )
        gated.append((key, GatedPod(pod, ask, tenant)))


def assemble(
    tenants: dict[str, TenantPicture], released: Mapping[str, list[tuple[str, int, PodCharge]]],
    gated: list[tuple[str, GatedPod]], unlimited: list[tuple[str, dict[str, Any]]], model: ClusterModel,
    live_gang_members: Callable[[ClusterModel], Mapping[str, int]], read: Mapping[str, PodRead],
) -> QuotaPicture:
    """The picture from what `place` sorted out, every list in pod-key order."""
    for tenant, charges in released.items():
        if tenant in tenants:
            charges.sort(key=lambda entry: (entry[0], entry[1]))
            tenants[tenant].released.extend(charge for _key, _index, charge in charges)
    gated.sort(key=lambda entry: entry[0])
    unlimited.sort(key=lambda entry: entry[0])
    _group([item for _key, item in gated], tenants, model, live_gang_members)
    return QuotaPicture(tenants, [pod for _key, pod in unlimited], read)


def pod_charges(pod: dict[str, Any], model: ClusterModel) -> PodCharge | None:
    """What one pod asks of its quota, as a waiter: its GPU resources, else its own claims (merged)."""
    mapped = mapped_resources(model.device_classes)
    found = charges_of(pod, model, mapped, lambda: CLAIM_CHARGING.value.claim_charges(model, mapped))
    if not found:
        return None
    return found[0] if len(found) == 1 else _merged(found)


def charges_of(
    pod: dict[str, Any], model: ClusterModel, mapped: Mapping[str, str], claim_usage: Callable[[], ClaimCharges]
) -> list[PodCharge]:
    """The pod's charges: its GPU resources, else what its own ResourceClaims hold or ask."""
    charge = pod_charge(pod, model, None)
    if charge is not None:
        return [charge]
    spec = pod.get("spec")
    if not isinstance(spec, dict) or not (spec.get("resourceClaims") or asks_mapped(spec, mapped)):
        return []
    return list(claim_usage().charges(pod))


def asks_mapped(spec: Mapping[str, Any], mapped: Mapping[str, str]) -> bool:
    if not mapped:
        return False
    for container in spec.get("containers") or []:
        resources = container.get("resources") if isinstance(container, dict) else None
        for section in ("requests", "limits"):
            asked = (resources or {}).get(section) or {}
            if isinstance(asked, dict) and any(key in mapped for key in asked):
                return True
    return False


def _merged(charges: list[PodCharge]) -> PodCharge:
    """Several charges of one gated pod (claims of several types): one ask against every type of any."""
    types = tuple(dict.fromkeys(t for c in charges for t in (c.candidate_types or ((c.bound_type,) if c.bound_type
                                                                                    else ()))))
    gpus = sum((c.gpu_equivalents for c in charges), ZERO)
    memory = sum((c.gpu_memory_bytes or ZERO for c in charges), ZERO)
    return replace(charges[0], candidate_types=types, bound_type=None, gpu_equivalents=gpus,
                   gpu_memory_bytes=memory, every_candidate=True)


def _group(gated: list[GatedPod], tenants: dict[str, TenantPicture], model: ClusterModel,
           live_gang_members: Callable[[ClusterModel], Mapping[str, int]]) -> None:
    """Gated pods into waiters: a pod alone, a sized gang's gated members together once the gang is whole."""
    gangs: dict[str, list[GatedPod]] = {}
    for item in gated:
        picture = tenants[str(item.tenant)]
        picture.pods[item.ask.pod] = item.pod
        member = membership(item.pod)
        if member is None:
            picture.waiters.append(Waiter(f"pod {item.ask.pod}", (item.ask,), _order(item.pod)))
        else:
            gangs.setdefault(member.key, []).append(item)
    # Every pod is read to count a gang's live members: only when some gang member waits (a pass of a large
    # cluster with no gated gang would otherwise read all its pods for nothing).
    live = live_gang_members(model) if gangs else {}
    for key, items in gangs.items():
        items.sort(key=lambda i: _order(i.pod))
        picture = tenants[str(items[0].tenant)]
        member = membership(items[0].pod)
        assert member is not None
        waiter = Waiter(f"gang {key}", tuple(i.ask for i in items), _order(items[0].pod))
        present = live.get(key, 0)
        if present < member.size:
            picture.incomplete.append((waiter, f"gang {member.gang} has {present} of its {member.size} pods; "
                                               "it is released whole"))
        else:
            picture.waiters.append(waiter)


def _live_gang_members(model: ClusterModel) -> dict[str, int]:
    counts: dict[str, int] = {}
    for pod in model.pods.values():
        view = PodView(pod)
        if view.terminal or view.deleting:
            continue
        member = membership(pod)
        if member is not None:
            counts[member.key] = counts.get(member.key, 0) + 1
    return counts


def plan_tenant(
    model: ClusterModel, config: Config, picture: TenantPicture, *, extra: Waiter | None = None,
    extra_pod: dict[str, Any] | None = None, hold: str | None = None,
    free_of: Callable[[ClusterModel], Mapping[str, int]] = free_gpus,
) -> TenantQueue:
    """The tenant's queue on this snapshot, as the controller, the views and admission all ask it: `extra` is
    a new pod (or gang) last in line, `hold` a reason nothing of the tenant may start (its budget), `free_of`
    the free GPUs per node (the controller's are kept with its picture)."""
    waiters = [*picture.waiters, extra] if extra is not None else picture.waiters
    pods = {**picture.pods, **({extra.asks[0].pod: extra_pod} if extra is not None and extra_pod else {})}
    return plan_queue(
        picture.tenant, picture.limits, picture.released, waiters, order=config.quotas.order,
        has_capacity=lambda waiter, type_id: has_capacity(model, waiter, type_id, pods, free_of), hold=hold,
    )
