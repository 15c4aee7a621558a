"""The quota controller: removes the `kgwe.io/quota` gate of pods whose tenant's quota holds them (leader only).

Woken by the cluster watch (a pod, TenantQuota or node changed), never on a fixed period. One pass, from a
current snapshot (`webhook/quotas/incremental.py` keeps the picture from the watch's events, reading again only
what changed, equal to what `webhook/quotas/waiters.py` computes from every pod; `policies/quota/queue.py` decides).
A replica that does not lead keeps no reads (the task's standby tick drops them); its first pass as leader, and
the pass after one that failed, read every pod:

- per tenant, in creation order, a waiting pod (or a sized gang, whole) that fits every limit on a type it
  can run on is released: pinned to that type when it may run on several (added to its node constraints,
  as Kubernetes allows while a pod is gated), `kgwe.io/accelerator-type` set to it, and the gate removed,
  in one patch carrying the resourceVersion read, so a concurrent change is never overwritten;
- a gated pod of a tenant without a TenantQuota is released as it is (nothing limits it);
- a pod that waits gets the condition `kgwe.io/QuotaAvailable=False` (reason `WaitingForQuota`) and an Event
  saying what it waits for, each time that changes;
- each TenantQuota's `status` says what its limits count now (`used`: released pods) and what waits.

A pod released this pass counts as released until the watch shows it so (`_in_flight`), so a pass never
counts it twice or not at all. A new leader starts from the API's state: whatever an old leader released
is visible as ungated pods by then (a leader stops acting before its lease can be taken over), and what it
did not release is still gated.
"""

from __future__ import annotations

import copy
import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from prometheus_client import Counter, Gauge

from policies.gpu_demand import pod_gpu_demand
from policies.kernel.api_errors import api_exception
from policies.kernel.background import Backoff, Task
from policies.kernel.metrics import replace_series
from policies.quota.budget import BudgetState, judge
from policies.quota.model import format_gpus, format_memory
from policies.quota.queue import Release, TenantQueue, Wait, Waiter, wait_message
from policies.vocabulary.objects import PodView, objects
from webhook.cluster.model import ClusterModel, ClusterStore, object_key
from webhook.config import Config
from webhook.costs import format_hourly_cost
from webhook.intent import OUT_ACCELERATOR_TYPE, OUT_HOURLY_COST
from webhook.placement.constraints import and_into_required_terms, apply_requirements
from webhook.quotas.incremental import QuotaIndex
from webhook.quotas.scheduling_gate import QUOTA_CONDITION, QUOTA_GATE
from webhook.quotas.waiters import PodRead, TenantPicture, plan_tenant
from webhook.quotas.writer import QuotaWriter

log = logging.getLogger("kgwe.quotas.controller")

# A released pod the watch has not shown ungated after this long is forgotten (the write was lost, or the pod
# is gone): the next pass reads it from the API's state again.
IN_FLIGHT_SECONDS = 60.0
# How often a waiting pod's condition is rewritten when only its place in line moved.
POSITION_REFRESH_SECONDS = 30.0

RELEASED = Counter("kgwe_quota_released_total", "Pods whose kgwe.io/quota gate KGWE removed, by tenant", ["tenant"])
WAITING = Gauge("kgwe_quota_waiting_pods", "Pods gated by kgwe.io/quota that wait for their tenant's quota",
                ["tenant"])
RELEASE_SECONDS = Gauge("kgwe_quota_pass_seconds",
                        "Duration of the quota controller's last pass, from its snapshot to its last write")


@dataclass
class PassResult:
    released: list[tuple[str, str | None]] = field(default_factory=list)  # (namespace/name, type pinned)
    waiting: dict[str, str] = field(default_factory=dict)  # namespace/name -> message
    conflicts: int = 0
    refused: list[str] = field(default_factory=list)  # namespace/name of pods whose release the API refused


def release_patch(pod: dict[str, Any], model: ClusterModel, type_id: str | None, pin: bool,
                  price: Decimal | None, equivalents: Decimal | None) -> dict[str, Any]:
    """The one merge patch of a release: the gate removed, the pod pinned to `type_id` (only by additions to its
    node constraints, which Kubernetes allows while the pod is gated), the type and price it is charged."""
    view = PodView(pod)
    gates = [g for g in objects(view.spec.get("schedulingGates")) if g.get("name") != QUOTA_GATE]
    body: dict[str, Any] = {
        "metadata": {"resourceVersion": view.resource_version},
        "spec": {"schedulingGates": gates or None},
    }
    if type_id is not None:
        notes: dict[str, Any] = {OUT_ACCELERATOR_TYPE: type_id}
        if price is not None and equivalents:
            notes[OUT_HOURLY_COST] = format_hourly_cost(equivalents * price)
        body["metadata"]["annotations"] = notes
    summary = model.types.get(type_id) if pin and type_id is not None else None
    selector = summary.selector() if summary is not None else None
    if selector is not None:
        from policies.vocabulary.requirements import Requirement

        key, values = selector
        pinned = {"spec": copy.deepcopy({k: v for k, v in view.spec.items() if k in ("nodeSelector", "affinity")})}
        requirement = Requirement(key, "In", tuple(values))
        own = view.spec.get("nodeSelector")
        if isinstance(own, dict) and key in own and own[key] not in values:
            # The pod's own nodeSelector names another value of the key: Kubernetes lets a gated pod's
            # nodeSelector only gain keys (changing it is a 422), so the pin goes into its required affinity.
            and_into_required_terms(pinned, [requirement.as_expression()])
        else:
            apply_requirements(pinned, [requirement])
        spec = pinned["spec"]
        if spec.get("nodeSelector") != view.spec.get("nodeSelector"):
            body["spec"]["nodeSelector"] = spec.get("nodeSelector")
        required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
            "requiredDuringSchedulingIgnoredDuringExecution")
        if required is not None and spec.get("affinity") != view.spec.get("affinity"):
            body["spec"]["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": required}}
    return body


class QuotaController:
    def __init__(
        self,
        store: ClusterStore,
        config: Config,
        writer: QuotaWriter | None,
        *,
        is_leader: Callable[[], bool] = lambda: True,
        clock: Callable[[], float] = time.monotonic,
        position_refresh_seconds: float = POSITION_REFRESH_SECONDS,
        budgets: Callable[[], Mapping[str, BudgetState]] | None = None,
    ) -> None:
        self.store = store
        self.budgets = budgets
        self.position_refresh_seconds = position_refresh_seconds
        self.config = config
        self.writer = writer
        self.is_leader = is_leader
        self.clock = clock
        # uid -> (type pinned, when released, namespace/name)
        self._in_flight: dict[str, tuple[str | None, float, str]] = {}
        # uid -> the waiting message last written, when, and the pod's namespace/name
        self._told: dict[str, tuple[str, float, str]] = {}
        self._statuses: dict[str, dict[str, Any]] = {}  # TenantQuota name -> the status last written
        # Every pod's charges, kept from the watch's events (webhook/quotas/incremental.py): a pass reads again
        # only the pods that changed, not every pod of the cluster.
        self._index = QuotaIndex()
        self.last: PassResult | None = None
        self._timer: threading.Timer | None = None
        self._timer_lock = threading.Lock()
        self.task = Task(
            "quota-release", self.reconcile_once, interval=None, leader_only=True, is_leader=lambda: self.is_leader(),
            run_at_start=True, backoff=Backoff(base=0.2, cap=10.0),
            on_error=lambda _exc: log.exception("quota release pass failed; retrying"),
            # The task runs no pass while this replica does not lead, so its wakes drop the reads here: a
            # follower holds no copy of every pod, and the marks it would gather are not needed.
            standby=self._index.forget,
        )
        store.add_listener(self._index.changed)
        store.add_listener(self._changed)

    def wake(self, kind: str | None = None) -> None:
        if kind in (None, "Pod", "TenantQuota", "Node", "ResourceSlice", "ResourceClaim"):
            self.task.wake()

    def _changed(self, kind: str | None, obj: dict[str, Any] | None) -> None:
        """A watch event: a pod that neither asks GPUs nor waits behind the gate cannot change what a tenant
        uses or who waits, so its status updates (the kubelet's, every few seconds per pod) wake nothing."""
        if kind == "Pod" and obj is not None and not _holds_or_waits(obj):
            return
        self.wake(kind)

    # -- one pass ------------------------------------------------------------------------------
    def reconcile_once(self) -> PassResult:
        if not self.is_leader():
            self._index.forget()  # a replica that does not lead keeps no reads; a new leader starts from the API's
            return PassResult()
        pending = self._index.take()  # before the snapshot: every change it holds is marked by then
        # A change moves the generation before it is marked: a snapshot at the generation read now holds every mark.
        # The background rebuild's, shared with admission and the gang pass, not one forced per pass (per GPU pod).
        marked = self.store.generation
        try:
            model = self.store.snapshot(at_least=marked)
        except BaseException:
            self._index.start_over()  # the marks just taken are not read: the next pass reads every pod
            raise
        started = self.clock()  # the pass's own work: the wait for the shared rebuild is not the pass's
        self._forget_expired()
        in_flight = {uid: pinned for uid, (pinned, _t, _k) in self._in_flight.items()}
        picture = self._index.picture(model, pending, in_flight)
        # After the picture, from its reads (one walk over the pods, not two): a released pod seen ungated or
        # gone counts as released either way, so forgetting it before or after the picture is the same.
        self._forget_seen(picture.read)
        result = PassResult()
        for pod in picture.unlimited:
            self._release(model, pod, None, False, result)
        waiting_by_tenant: dict[str, int] = {}
        for tenant, tenant_picture in sorted(picture.tenants.items()):
            queue = self.plan(model, tenant_picture)
            for release in queue.releases:
                for ask in release.waiter.asks:
                    member = tenant_picture.pods.get(ask.pod)
                    if member is not None:
                        self._release(model, member, release.type_id, release.pin, result)
            waits = [*queue.waits, *(Wait(w, why, 0) for w, why in tenant_picture.incomplete)]
            waiting_by_tenant[tenant] = sum(len(w.waiter.asks) for w in waits)
            for wait in waits:
                message = wait_message(tenant, wait) if wait.position else f"{tenant}: {wait.reason}"
                for ask in wait.waiter.asks:
                    member = tenant_picture.pods.get(ask.pod)
                    if member is not None:
                        result.waiting[ask.pod] = message
                        self._tell(member, message)
            self._write_status(tenant_picture, queue)
        replace_series(WAITING, {(t,): float(n) for t, n in waiting_by_tenant.items()})
        RELEASE_SECONDS.set(self.clock() - started)
        self.last = result
        return result

    def plan(self, model: ClusterModel, picture: TenantPicture) -> TenantQueue:
        # The free GPUs kept with the picture: placement's of a new snapshot read every pod, on the release's path.
        return plan_tenant(model, self.config, picture, hold=self._budget_hold(picture.tenant),
                           free_of=self._index.free_gpus)

    def _budget_hold(self, tenant: str) -> str | None:
        """Why none of the tenant's pods may start: its budget passed with `action: Queue`. While one holds,
        the controller looks again when the budget states may have moved (nothing else may wake it)."""
        if self.budgets is None:
            return None
        verdict = judge(self.budgets().get(tenant))
        if verdict.effect != "queue":
            return None
        self._refresh_later(max(1.0, self.config.costs.cache_seconds))
        return verdict.reason

    def _forget_expired(self) -> None:
        """A release the snapshot has not shown within IN_FLIGHT_SECONDS is not counted released any longer."""
        now = self.clock()
        for uid, (_pinned, at, _key) in list(self._in_flight.items()):
            if now - at > IN_FLIGHT_SECONDS:
                del self._in_flight[uid]

    def _forget_seen(self, live: Mapping[str, PodRead]) -> None:
        """Released pods the snapshot shows ungated (or gone) need no in-flight entry any more, and pods that are
        gone no record of what they were told (`live`: every pod by namespace/name; a pod of the same name with
        another uid is another pod)."""
        for uid, (_pinned, _at, key) in list(self._in_flight.items()):
            seen = live.get(key)
            if seen is None or seen.uid != uid or not seen.gated:
                del self._in_flight[uid]
        for uid, (_message, _at, key) in list(self._told.items()):
            seen = live.get(key)
            if seen is None or seen.uid != uid:
                del self._told[uid]

    # -- effects ---------------------------------------------------------------------------------
    def _release(self, model: ClusterModel, pod: dict[str, Any], type_id: str | None, pin: bool,
                 result: PassResult) -> None:
        view = PodView(pod)
        if self.writer is None or not self.is_leader():
            result.released.append((f"{view.namespace}/{view.name}", type_id))
            return
        price = self.config.price_per_gpu_hour(type_id) if type_id else None
        equivalents = _equivalents(pod, model, type_id)
        try:
            self.writer.release(pod, release_patch(pod, model, type_id, pin, price, equivalents))
        except api_exception() as exc:
            if exc.status == 404:
                return  # deleted meanwhile
            if exc.status == 409:
                # Changed since the snapshot: the watch brings the change, and with it the next pass.
                result.conflicts += 1
                return
            if exc.status is not None and 400 <= exc.status < 500:
                # Refused for this pod alone (invalid, forbidden by an admission policy): it stays gated and is
                # tried again next pass; the pass goes on, so no pod can stall the release of every other.
                log.warning("pod %s/%s: release refused (%s): %s", view.namespace, view.name, exc.status,
                            (exc.body or exc.reason or "")[:512])
                result.refused.append(f"{view.namespace}/{view.name}")
                return
            raise
        self._in_flight[view.uid] = (type_id, self.clock(), object_key(pod))
        self._told.pop(view.uid, None)
        tenant = view.annotation("kgwe.io/tenant") or ""
        RELEASED.labels(tenant=tenant).inc()
        result.released.append((f"{view.namespace}/{view.name}", type_id))

    def _tell(self, pod: dict[str, Any], message: str) -> None:
        """The pod's condition says why it waits; an Event too when the reason (not only its place in line)
        changes. A place in line that moved is written at most every `position_refresh_seconds`: each release
        moves every pod behind it, and one write per waiting pod per release would load the API server."""
        view = PodView(pod)
        if self.writer is None:
            return
        now = self.clock()
        told = self._told.get(view.uid)
        last = told[0] if told is not None else _condition_message(pod)
        if last == message:
            return
        same_reason = last is not None and _reason(last) == _reason(message)
        if same_reason and told is not None and now - told[1] < self.position_refresh_seconds:
            self._refresh_later()
            return
        try:
            self.writer.waiting(pod, message, event=not same_reason)
        except api_exception() as exc:
            if exc.status not in (404, 409):
                log.warning("pod %s/%s: waiting condition not written: %s", view.namespace, view.name, exc.reason)
            return
        self._told[view.uid] = (message, now, object_key(pod))

    def _refresh_later(self, delay: float | None = None) -> None:
        """One wake after the refresh interval, so a deferred place in line is written even if nothing else
        changes meanwhile (never more than one timer outstanding)."""
        with self._timer_lock:
            if self._timer is not None and self._timer.is_alive():
                return
            self._timer = threading.Timer(self.position_refresh_seconds if delay is None else delay, self.wake)
            self._timer.daemon = True
            self._timer.start()

    def _write_status(self, picture: TenantPicture, queue: TenantQueue) -> None:
        if self.writer is None:
            return
        for quota in picture.quotas:
            name = PodView(quota).name
            status = tenant_status(picture, queue, name)
            current = quota.get("status") if isinstance(quota.get("status"), dict) else {}
            assert isinstance(current, dict)
            if self._statuses.get(name) == status or {k: current.get(k) for k in status} == status:
                self._statuses[name] = status
                continue
            try:
                self.writer.status(name, status)
            except api_exception() as exc:
                log.warning("TenantQuota %s: status not written: %s", name, exc.reason)
                continue
            self._statuses[name] = status


def _holds_or_waits(pod: dict[str, Any]) -> bool:
    """The pod may hold or wait for quota: it is gated, names claims, or asks an extended resource (GPUs, MIG
    slices, DRA devices as extended resources all have a domain: `nvidia.com/gpu`, `deviceclass.resource...`)."""
    view = PodView(pod)
    if QUOTA_GATE in view.scheduling_gates or view.spec.get("resourceClaims") or pod_gpu_demand(view).asks_gpu:
        return True
    for key in ("containers", "initContainers"):
        for container in objects(view.spec.get(key)):
            resources = container.get("resources")
            for section in ("limits", "requests"):
                asked = resources.get(section) if isinstance(resources, dict) else None
                if isinstance(asked, dict) and any("/" in str(name) for name in asked):
                    return True
    return False


def _reason(message: str) -> str:
    """A waiting message without its place in line ("...; 2nd in line")."""
    head, _sep, tail = message.rpartition("; ")
    return head if head and tail.endswith(" in line") else message


def _condition_message(pod: dict[str, Any]) -> str | None:
    status = pod.get("status") if isinstance(pod.get("status"), dict) else None
    for condition in objects((status or {}).get("conditions")):
        if condition.get("type") == QUOTA_CONDITION and condition.get("status") == "False":
            return str(condition.get("message") or "")
    return None


def _equivalents(pod: dict[str, Any], model: ClusterModel, type_id: str | None) -> Decimal | None:
    from webhook.costs import pod_gpu_equivalents

    if type_id is None:
        return None
    try:
        return pod_gpu_equivalents(PodView(pod), None, type_id, model)
    except (ValueError, ArithmeticError):
        return None


def tenant_status(picture: TenantPicture, queue: TenantQueue, quota: str) -> dict[str, Any]:
    """`status.used` (what released pods, this pass's releases included, count against each limit of this
    TenantQuota) and `status.waiting` (the gated pods and their GPUs), as the controller counted them."""
    ledger = queue.ledger  # released pods and this pass's releases: they hold quota from now on
    used = []
    for limit in picture.limits:
        if limit.quota != quota:
            continue
        entry: dict[str, Any] = {limit.key.kind: limit.key.name, "gpus": format_gpus(ledger.gpus[limit.key])}
        if limit.gpu_memory is not None:
            entry["gpuMemory"] = format_memory(ledger.memory[limit.key])
        used.append(entry)
    waiting = []
    waits: list[tuple[Waiter, str]] = [(w.waiter, w.reason) for w in queue.waits] + list(picture.incomplete)
    for waiter, reason in waits[:100]:
        gpus = sum((a.gpus for a in waiter.asks), Decimal(0))
        waiting.append({"name": waiter.label.split(" ", 1)[1], "kind": waiter.label.split(" ", 1)[0],
                        "pods": len(waiter.asks), "gpus": format_gpus(gpus), "reason": reason[:256]})
    return {"used": used, "waiting": waiting}


__all__ = ["PassResult", "QuotaController", "Release", "release_patch"]
