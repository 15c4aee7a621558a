"""The quota controller's picture kept from the cluster watch (issue 36): a pass reads again only what changed.

`quota_picture` (webhook/quotas/waiters.py) walks every pod of the snapshot; at 150,000 pods that is about a
CPU-second per pass, so a pod's change reached the controller's decisions in tens of seconds. Here every pod's
read (its charges and the tenants they count for) is kept between passes, with indexes of who reads what:

- a pod event (the store's listener) marks that pod: the next pass reads it again from its snapshot, and
  only its own tenants' sets move;
- a node whose facts changed: the pods bound to it (or naming it) are read again, and the pods on no known
  node that ask MPS or time-slicing (the replicas of their types' nodes price them before binding);
- a Namespace that changed: its pods (their charges carry its labels);
- pods with ResourceClaims or DRA extended resources of their own: every pass, as the full computation does
  (their charges follow the claims, and a claim several pods name is paid for once);
- the TenantQuotas' specs (which namespaces and groups each tenant claims): every pod's owners again, from
  the charges kept (a status write, the controller's own, changes no spec and costs nothing);
- the accelerator table, a HardwareProfile or a DeviceClass, a relist of pods or of everything, the first
  pass and a pass that failed: every pod read again, as the full computation would (the start-up path).

A pass then places only the pods of tenants with a TenantQuota and the gated pods, through the same code as
the full computation (`place`, `assemble`), so the two give equal pictures: tests/quotas/
test_incremental_picture.py drives seeded random events and compares them after each.

The GPUs each node's unfinished bound pods hold are kept alike, moved by each pod read again (`free_gpus`, what
the queue's `has_capacity` asks when a tenant's quota has room): the pass in which a running pod goes and the
one waiting behind it is released asked placement's `free_gpus` (webhook/placement/free_gpus.py), kept from the
last snapshot asked but cold when nothing had asked it since start: it read every pod first (seconds at 150,000
pods, on the release's path; issue 36). Equal to placement's, compared after every random event too.

The marks are taken before the pass's snapshot is, so a change the snapshot holds was marked by then, except
one whose listener has not run yet when the snapshot is built: that pod keeps its previous read for one pass,
as if its event came just after the snapshot, and its listener's wake brings the next pass, which reads it.
A pass that fails after taking the marks (its snapshot, its reads) leaves every pod to be read next
(`start_over`): the marks it took are gone with it. A replica that does not lead keeps nothing (`forget`).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from policies.vocabulary.objects import PodView
from webhook.cluster.device_classes import mapped_resources
from webhook.cluster.model import ClusterModel, object_key
from webhook.cluster.read_epochs import profile_specs
from webhook.gang_spec import membership
from webhook.placement.free_gpus import HeldGpus
from webhook.quota_charges import priced_by_type_sharing
from webhook.quotas.waiters import (
    GatedPod,
    PodRead,
    QuotaPicture,
    TenantPicture,
    asks_mapped,
    assemble,
    charged,
    claim_usage_of,
    owners_of,
    place,
    read_pod,
    tenant_pictures,
)


@dataclass(frozen=True)
class Pending:
    """The marks a pass takes before its snapshot: the pods changed since the last pass, or every pod."""

    pods: frozenset[str]
    everything: bool


def _same(before: Mapping[str, object] | None, now: Mapping[str, object]) -> bool:
    """The same objects under the same names (the store never changes an object in place)."""
    if before is now:
        return True
    return before is not None and len(before) == len(now) and all(before.get(k) is v for k, v in now.items())


def _changed_names(before: Mapping[str, object] | None, now: Mapping[str, object]) -> list[str]:
    if before is now:
        return []
    before = before or {}
    return [k for k in {*before, *now} if before.get(k) is not now.get(k)]


def _ownership(tenants: Mapping[str, TenantPicture]) -> list[tuple[str, list[tuple[str, Any]]]]:
    """What decides which tenant a charge counts for (`charge_belongs_to`): the TenantQuotas' specs, by tenant."""
    return [(t, [(PodView(q).name, q.get("spec")) for q in p.quotas]) for t, p in tenants.items()]


class QuotaIndex:
    """Every pod's read, kept from watch events; `picture` answers what `quota_picture` would of a snapshot.
    One pass at a time (the controller's task); the listener may run on any thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._marked: set[str] = set()
        self._everything = True
        self._reads: dict[str, PodRead] = {}  # every pod by namespace/name, finished ones too
        self._by_node: dict[str, set[str]] = {}  # unfinished pods by the node they name
        self._by_namespace: dict[str, set[str]] = {}  # unfinished pods by namespace
        self._unbound: set[str] = set()  # unfinished pods on no known node priced by their types' nodes
        self._always: set[str] = set()  # unfinished pods charged through claims: read every pass
        self._members: dict[str, set[str]] = {}  # tenant -> unfinished pods with a charge it counts
        self._gated: set[str] = set()  # unfinished pods behind the quota gate, not being deleted
        self._gang_of: dict[str, str] = {}  # live gang member -> its gang
        self._gang_live: dict[str, int] = {}  # gang -> live members
        self._held = HeldGpus()  # the whole GPUs each node's unfinished bound pods hold (placement's count)
        self._free: tuple[ClusterModel, dict[str, int]] | None = None  # the last answer, while `_held` stands
        self._nodes: Mapping[str, object] | None = None  # what the reads were read against
        self._namespaces: Mapping[str, object] | None = None
        self._context: tuple[object, tuple[tuple[str, object], ...], Mapping[str, object]] | None = None
        self._owners_for: list[tuple[str, list[tuple[str, Any]]]] | None = None

    # -- events (the store's listener) -----------------------------------------------------------
    def changed(self, kind: str | None, obj: dict[str, Any] | None) -> None:
        if kind is None or (kind == "Pod" and obj is None):  # a relist
            with self._lock:
                self._everything = True
        elif kind == "Pod" and obj is not None:
            key = object_key(obj)
            with self._lock:
                if not self._everything:  # every pod is read next anyway (and a replica not leading keeps no marks)
                    self._marked.add(key)

    def take(self) -> Pending:
        """The marks so far, taken before the pass's snapshot (a later mark is the next pass's)."""
        with self._lock:
            pending = Pending(frozenset(self._marked), self._everything)
            self._marked = set()
            self._everything = False
        return pending

    def forget(self) -> None:
        """Drop every read (the replica stopped leading): the next pass, if any, reads every pod."""
        self.start_over()
        self._clear()

    def start_over(self) -> None:
        """The next pass reads every pod: this one failed after taking the marks, which are gone with it."""
        with self._lock:
            self._everything = True
            self._marked = set()

    # -- a pass ------------------------------------------------------------------------------------
    def picture(self, model: ClusterModel, pending: Pending, in_flight: Mapping[str, str | None]) -> QuotaPicture:
        try:
            tenants = tenant_pictures(model)
            self._refresh(model, pending, tenants)
        except BaseException:
            self.start_over()  # half read, or the marks taken and not read: the next pass reads every pod
            raise
        released: dict[str, list[tuple[str, int, Any]]] = {}
        gated: list[tuple[str, GatedPod]] = []
        unlimited: list[tuple[str, dict[str, Any]]] = []
        placed = set(self._gated)
        for tenant in tenants:
            placed |= self._members.get(tenant, set())
        for key in placed:
            place(key, self._reads[key], tenants, in_flight, released, gated, unlimited, model)
        return assemble(tenants, released, gated, unlimited, model, lambda _model: self._gang_live, self._reads)

    def _refresh(self, model: ClusterModel, pending: Pending, tenants: dict[str, TenantPicture]) -> None:
        # A HardwareProfile by its spec's value: the status KGWE writes to it whenever free GPUs move is read by no
        # charge (webhook/cluster/read_epochs.py `profile_specs`), and read every pod again at each write.
        context = (model.table, profile_specs(model), model.device_classes)
        everything = pending.everything or self._context is None or context[0] is not self._context[0] or not (
            self._context[1] == context[1] and _same(self._context[2], context[2]))
        ownership = _ownership(tenants)
        owners_moved = ownership != self._owners_for
        mapped = mapped_resources(model.device_classes)
        claim_usage = claim_usage_of(model, mapped)
        if everything:
            self._clear()
            keys: Iterable[str] = model.pods
        else:
            todo = set(pending.pods) | self._always
            nodes = _changed_names(self._nodes, model.nodes)
            for name in nodes:
                todo |= self._by_node.get(name, set())
            if nodes:
                todo |= self._unbound
            for name in _changed_names(self._namespaces, model.namespaces):
                todo |= self._by_namespace.get(name, set())
            keys = todo
        for key in list(keys):
            self._read(key, model.pods.get(key), model, mapped, claim_usage, tenants)
        if owners_moved and not everything:
            for key, read in list(self._reads.items()):
                if not read.terminal and read.charges:
                    self._unindex(key, read)
                    self._store(key, _with_owners(read, owners_of(read.charges, tenants)), model, mapped)
        self._nodes, self._namespaces = model.nodes, model.namespaces
        self._context, self._owners_for = context, ownership

    def free_gpus(self, model: ClusterModel) -> dict[str, int]:
        """`webhook.placement.free_gpus.free_gpus(model)` from the held GPUs kept: those of the pods as the last pass
        read them, which is `model` when it was that pass's snapshot."""
        if self._free is not None and self._free[0] is model:
            return self._free[1]
        free = self._held.free(model)
        self._free = (model, free)
        return free

    def _read(self, key: str, pod: dict[str, Any] | None, model: ClusterModel, mapped: Mapping[str, str],
              claim_usage: Any, tenants: Mapping[str, TenantPicture]) -> None:
        old = self._reads.pop(key, None)
        if old is not None:
            self._unindex(key, old)
            self._hold(old, -1)
        if pod is None:
            return
        read = read_pod(pod)
        if not read.terminal:
            read = charged(read, model, mapped, claim_usage, tenants, None)
        self._store(key, read, model, mapped)
        self._hold(read, 1)

    def _hold(self, read: PodRead, sign: int) -> None:
        """Move the GPUs a read pod holds on its node (a pod's demand is read again to take it off: only the
        pods a pass reads again pay for it, not a kept field per pod)."""
        if self._held.move(read.pod, sign):
            self._free = None

    def _store(self, key: str, read: PodRead, model: ClusterModel, mapped: Mapping[str, str]) -> None:
        self._reads[key] = read
        if read.terminal:
            return
        pod = read.pod
        self._by_namespace.setdefault(PodView(pod).namespace, set()).add(key)
        if read.node_name:
            self._by_node.setdefault(read.node_name, set()).add(key)
        if read.node is None and read.charges and priced_by_type_sharing(pod, model):
            self._unbound.add(key)
        spec = pod.get("spec")
        if read.claims or (isinstance(spec, dict) and asks_mapped(spec, mapped)):
            self._always.add(key)
        for _index, owner in read.owners:
            self._members.setdefault(owner, set()).add(key)
        if read.gated and not read.deleting:
            self._gated.add(key)
        member = membership(pod) if not read.deleting else None
        if member is not None:
            self._gang_of[key] = member.key
            self._gang_live[member.key] = self._gang_live.get(member.key, 0) + 1

    def _unindex(self, key: str, read: PodRead) -> None:
        if read.terminal:
            return
        _discard(self._by_namespace, PodView(read.pod).namespace, key)
        if read.node_name:
            _discard(self._by_node, read.node_name, key)
        self._unbound.discard(key)
        self._always.discard(key)
        for _index, owner in read.owners:
            _discard(self._members, owner, key)
        self._gated.discard(key)
        gang = self._gang_of.pop(key, None)
        if gang is not None:
            left = self._gang_live[gang] - 1
            if left:
                self._gang_live[gang] = left
            else:
                del self._gang_live[gang]

    def _clear(self) -> None:
        for held in (self._reads, self._by_node, self._by_namespace, self._members, self._gang_of, self._gang_live,
                     self._held):
            held.clear()
        self._free = None
        for keys in (self._unbound, self._always, self._gated):
            keys.clear()


def _discard(index: dict[str, set[str]], name: str, key: str) -> None:
    keys = index.get(name)
    if keys is not None:
        keys.discard(key)
        if not keys:
            del index[name]


def _with_owners(read: PodRead, owners: tuple[tuple[int, str], ...]) -> PodRead:
    return replace(read, owners=owners, owners_for=None)


__all__ = ["Pending", "QuotaIndex"]
