"""The one pass behind every inventory view: what each accelerator type has, what bound pods use and
unbound pods wait for, what each node lends, and what each running pod costs.

Units: a whole-GPU or shared (MPS, time-slicing) bucket counts physical GPUs, a shared node's replicas
divided by its replicas per GPU; a MIG bucket counts slices of its profile. `available` is what the node
allocates minus what bound unfinished pods request; `pending` is what unbound unfinished pods ask on a
type named by their `kgwe.io/accelerator-type` annotation (a pod that may land on several types counts
on each; `pending` lists each such pod once, for the views that must count it once). Cordoned nodes hold
no capacity. DRA nodes count what allocated ResourceClaims hold.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from policies.gpu_demand import mig_compute_slices, pod_gpu_demand
from policies.quota.model import PodCharge, resolve_tenant
from policies.vocabulary.accelerator_types import UNKNOWN
from policies.vocabulary.objects import PodView
from webhook.cluster.claim_charging import CLAIM_CHARGING
from webhook.cluster.device_classes import DRA_GPUS, DRA_MIG_PREFIX, dra_allocatable, dra_used
from webhook.cluster.model import ClusterModel
from webhook.cluster.node_facts import GPU_RESOURCE, MIG_RESOURCE_PREFIX, NodeFacts
from webhook.cluster.read_epochs import bound_node
from webhook.cluster.shared_parts import amount
from webhook.config import Config
from webhook.costs import parse_hourly_cost, pod_hourly_cost, price_per_gpu_hour
from webhook.intent import A_PROFILE, A_SHARING, OUT_ACCELERATOR_TYPE, OUT_HOURLY_COST, OUT_TENANT
from webhook.inventory.node_units import demand_resources, whole_resource
from webhook.inventory.numbers import ZERO
from webhook.quota_charges import pod_charge, still_read

SHARED_MODES = ("mps", "time-slicing")


@dataclass
class Bucket:
    """Capacity of one kind on one type: whole GPUs, one sharing mode, or one MIG profile."""

    total: Decimal = ZERO
    allocatable: Decimal = ZERO
    used: Decimal = ZERO
    nodes: int = 0
    min_replicas: int = 0  # shared buckets: the smallest replicas per GPU among the nodes

    @property
    def available(self) -> Decimal:
        return max(ZERO, self.allocatable - self.used)


@dataclass
class TypeCapacity:
    whole: Bucket = field(default_factory=Bucket)
    shared: dict[str, Bucket] = field(default_factory=dict)  # mps | time-slicing
    mig: dict[str, Bucket] = field(default_factory=dict)  # profile -> slices
    pending_whole: Decimal = ZERO
    pending_mig: dict[str, Decimal] = field(default_factory=dict)

    def equivalents_available(self) -> Decimal:
        """Free capacity in GPU-equivalents (SPEC section 6): whole GPU 1, MIG slice slices/7."""
        total = self.whole.available + sum((b.available for b in self.shared.values()), ZERO)
        for profile, bucket in self.mig.items():
            total += bucket.available * mig_compute_slices(profile) / 7
        return total


@dataclass(frozen=True, slots=True)
class PendingPod:
    """An unbound unfinished GPU pod: who it is charged to and what it waits for, once (the views decide
    where it shows; a pod that may land on several types or profiles is still one pod)."""

    namespace: str
    name: str
    tenant: str
    types: tuple[str, ...]  # its candidate types known to the cluster, in the webhook's order of preference
    profile: str | None  # kgwe.io/profile, when it asked for one
    sharing: str | None  # kgwe.io/sharing, when it asked for a sharing mode
    whole_gpus: int
    mig: Mapping[str, int]


@dataclass(frozen=True, slots=True)
class PodCost:
    namespace: str
    name: str
    tenant: str
    type_id: str
    hourly: Decimal | None  # None: no price known for the pod's type
    source: str  # annotation | computed | unpriced


@dataclass(frozen=True, slots=True)
class _PodFacts:
    """What one pod object adds to an `Inventory`, remembered between builds while the pod object and what
    they were read from are the same (InventoryMemo in webhook/inventory/cache.py): the tenant is resolved
    again each build (it follows the Namespaces and TenantQuotas), the rest is the pod's own."""

    pod: dict[str, Any]
    node: NodeFacts | None  # the facts of the node it is bound to, when the snapshot knows it
    nodes_epoch: int  # for a pod on no known node: which set of node facts it was read against
    counted: bool  # an unfinished pod that asks GPUs
    node_name: str
    used: Mapping[str, Decimal]  # bound: what it takes from its node
    pending: PendingPod | None  # unbound: its pending row (the tenant as it was when read)
    charge: PodCharge | None
    cost: PodCost | None  # bound: its cost row (the tenant as it was when read)
    named_tenant: bool  # its kgwe.io/tenant annotation names the tenant (else its namespace's)
    own_devices: bool  # unfinished, with ResourceClaims or DRA devices of its own (charged through its claims)


class Inventory:
    """The per-snapshot precompute behind every view."""

    def __init__(self, model: ClusterModel, config: Config, now: datetime | None = None, memo: Any = None) -> None:
        """`memo` (webhook/inventory/cache.py InventoryMemo): what each pod object added to the previous
        build, reused while the pod and its inputs are the same objects; None computes every pod."""
        self.model = model
        self._memo = memo
        self.config = config
        self.generated_at = now or datetime.now(UTC)
        self.node_used: dict[str, dict[str, Decimal]] = {}
        self.node_gpu_pods: dict[str, int] = {}  # unfinished GPU pods bound to each node
        self.types: dict[str, TypeCapacity] = {}
        self.charges: list[PodCharge] = []
        self.pod_costs: list[PodCost] = []
        self.pending: list[PendingPod] = []
        self.namespace_tenants: dict[str, str] = {}
        self._waiting: dict[str, dict[str, Any]] | None = None
        self._waiting_read = memo is None
        self._collect_pods()
        self._collect_nodes()

    @property
    def waiting(self) -> dict[str, dict[str, Any]] | None:
        """Per tenant with a TenantQuota, the pods that wait for quota (the tenants view's `waiting`), when the
        memo keeps the quota picture between builds; None: the view reads the snapshot's own picture. Read when
        first asked: the picture charges every pod on a first build, and the nodes' view needs none of it."""
        if not self._waiting_read:
            self._waiting = self._memo.waiting_rows(self.model, self.config)
            self._waiting_read = True
        return self._waiting

    # -- precompute ---------------------------------------------------------------------------
    def _tenant_of_namespace(self, namespace: str) -> str:
        tenant = self.namespace_tenants.get(namespace)
        if tenant is None:
            tenant, _quotas = resolve_tenant(
                namespace, self.model.namespace_labels(namespace), [], list(self.model.tenant_quotas.values())
            )
            self.namespace_tenants[namespace] = tenant
        return tenant

    def _collect_pods(self) -> None:
        model = self.model
        for namespace in model.namespaces:
            self._tenant_of_namespace(namespace)
        memo = self._memo
        previous: dict[int, _PodFacts] = memo.entries if memo is not None else {}
        entries: dict[int, _PodFacts] = {}
        nodes_epoch: int = memo.nodes_epoch if memo is not None else -1
        computed = 0
        own: list[dict[str, Any]] = []
        for raw in model.pods.values():
            node = bound_node(raw, model)
            facts = previous.get(id(raw))
            if facts is None or not still_read(facts, raw, node, nodes_epoch):
                facts = self._pod_facts(raw, nodes_epoch)
                computed += 1
            if memo is not None:
                entries[id(raw)] = facts
                if facts.own_devices:
                    own.append(raw)
            if not facts.counted:
                continue
            self._add_pod(facts)
        if memo is not None:
            memo.entries = entries
            memo.computed = computed
        # With the memo, only the pods it found asking devices of their own have their claims read.
        self._collect_claimed_pods(
            memo.claimed(model, own) if memo is not None else CLAIM_CHARGING.value.claimed_charges(model))

    def _add_pod(self, facts: _PodFacts) -> None:
        """What one counted pod adds: its node's use and GPU pods, or its pending row; its charge; its cost."""
        node_name = facts.node_name
        if node_name:
            self._add_node_use(node_name, facts.used)
        elif facts.pending is not None:
            pending = facts.pending
            self._add_pending_ask(pending.types, pending.whole_gpus, pending.mig)
            if not facts.named_tenant and (tenant := self._tenant_of_namespace(pending.namespace)) != pending.tenant:
                pending = replace(pending, tenant=tenant)
            self.pending.append(pending)
        if facts.charge is not None:
            self.charges.append(facts.charge)
        if facts.cost is not None:
            cost = facts.cost
            if not facts.named_tenant and (tenant := self._tenant_of_namespace(cost.namespace)) != cost.tenant:
                cost = replace(cost, tenant=tenant)
            self.pod_costs.append(cost)

    def _add_node_use(self, node_name: str, used: Mapping[str, Decimal]) -> None:
        """A GPU pod bound to `node_name`: one more GPU pod there, and what it uses."""
        self.node_gpu_pods[node_name] = self.node_gpu_pods.get(node_name, 0) + 1
        node_used = self.node_used.setdefault(node_name, {})
        for key, quantity in used.items():
            node_used[key] = node_used.get(key, ZERO) + quantity

    def _add_pending_ask(self, types: Iterable[str], whole_gpus: int, mig: Mapping[str, int]) -> None:
        """An unbound GPU pod: what it asks, on each type it may land on."""
        for type_id in types:
            capacity = self._capacity(type_id)
            capacity.pending_whole += whole_gpus
            for profile, count in mig.items():
                capacity.pending_mig[profile] = capacity.pending_mig.get(profile, ZERO) + count

    def _pod_facts(self, raw: dict[str, Any], nodes_epoch: int) -> _PodFacts:
        """What the pod object adds to the inventory, the tenant left to the build (see `_PodFacts`)."""
        model = self.model
        pod = PodView(raw)
        node_name = pod.node_name
        facts = model.nodes.get(node_name) if node_name else None
        if pod.terminal:
            return _PodFacts(raw, facts, nodes_epoch, False, node_name, {}, None, None, None, False, False)
        own = self._memo is not None and self._memo.own_devices(raw)
        demand = pod_gpu_demand(pod)
        if not demand.asks_gpu:
            return _PodFacts(raw, facts, nodes_epoch, False, node_name, {}, None, None, None, False, own)
        notes = pod.annotations
        named = notes.get(OUT_TENANT) or ""
        tenant = named or self._tenant_of_namespace(pod.namespace)
        used: Mapping[str, Decimal] = {}
        pending: PendingPod | None = None
        if node_name:
            used = demand_resources(demand, facts)
        else:
            types = tuple(t for t in notes.get(OUT_ACCELERATOR_TYPE, "").split(",") if t in model.types)
            pending = PendingPod(
                pod.namespace, pod.name, tenant, types, notes.get(A_PROFILE, "").strip() or None,
                notes.get(A_SHARING, "").strip() or None, demand.whole_gpus, dict(demand.mig),
            )
        charge = pod_charge(pod, model, None)
        cost = self._pod_cost(pod, notes, facts, charge, tenant) if node_name else None
        return _PodFacts(raw, facts, nodes_epoch, True, node_name, used, pending, charge, cost, bool(named), own)

    def _collect_claimed_pods(self, claimed: Any) -> None:
        """Pods holding GPUs through DRA of their own (webhook/dra/claimed.py): their quota use, and once
        allocated on a node, their cost (each device its worth times its type's price; a claim several pods
        name is charged once, to its payer: webhook/dra/holders.py, as the cost history charges it). `claimed`:
        (pod, its claims' charges) for each such pod, as the DRA wing's `claimed_charges` yields them."""
        holders = CLAIM_CHARGING.value.claim_holders(self.model)  # the DRA wing's part (cluster/claim_charging.py)
        rows = {(c.namespace, c.name, c.type_id): i for i, c in enumerate(self.pod_costs)}
        for raw, charges in claimed:
            self.charges.extend(charges)
            pod = PodView(raw)
            if not pod.node_name:
                continue
            facts = self.model.nodes.get(pod.node_name)
            node_type = facts.accelerator_type if facts is not None and facts.is_typed else ""
            worth: dict[str, Decimal] = {}
            for hold in holders.held(pod):
                for gpu in hold.gpus:
                    type_id = gpu.type_id or node_type
                    if type_id:
                        worth[type_id] = worth.get(type_id, ZERO) + gpu.equivalents
            tenant = pod.annotations.get(OUT_TENANT) or self._tenant_of_namespace(pod.namespace)
            for type_id, equivalents in sorted(worth.items()):
                price = price_per_gpu_hour(pod, type_id, self.model, self.config)
                hourly = equivalents * price if price is not None else None
                cost = PodCost(pod.namespace, pod.name, tenant, type_id, hourly,
                               "computed" if hourly is not None else "unpriced")
                row = rows.get((pod.namespace, pod.name, type_id))
                if row is None:
                    rows[(pod.namespace, pod.name, type_id)] = len(self.pod_costs)
                    self.pod_costs.append(cost)
                else:  # one row per pod and type: GPUs of its own claims beside those it asks as resources
                    known = self.pod_costs[row]
                    total = known.hourly + hourly if known.hourly is not None and hourly is not None else None
                    self.pod_costs[row] = replace(known, hourly=total,
                                                  source=known.source if total is not None else "unpriced")

    def _pod_cost(
        self, pod: PodView, notes: Mapping[str, str], facts: NodeFacts | None, charge: PodCharge | None,
        tenant: str,
    ) -> PodCost:
        namespace = pod.namespace
        candidates = [t for t in notes.get(OUT_ACCELERATOR_TYPE, "").split(",") if t]
        if facts is not None and facts.is_typed:
            type_id = facts.accelerator_type
        elif candidates:
            type_id = candidates[0]
        else:
            type_id = facts.accelerator_type if facts is not None and facts.accelerator_type else UNKNOWN
        stated = parse_hourly_cost(notes.get(OUT_HOURLY_COST))
        if stated is not None:
            hourly: Decimal | None = stated
            source = "annotation"
        elif charge is not None and charge.bound_type == type_id:
            # The charge already holds the pod's GPU-equivalents on its node: only the price is missing.
            price = price_per_gpu_hour(pod, type_id, self.model, self.config)
            hourly = charge.gpu_equivalents * price if price is not None else None
            source = "computed" if hourly is not None else "unpriced"
        else:
            typed = facts if facts is not None and facts.is_typed else None
            hourly = pod_hourly_cost(pod, typed, type_id, self.model, self.config) if type_id != UNKNOWN else None
            source = "computed" if hourly is not None else "unpriced"
        return PodCost(namespace, pod.name, tenant, type_id, amount(hourly), source)  # held once (shared_parts.py)

    def _capacity(self, type_id: str) -> TypeCapacity:
        capacity = self.types.get(type_id)
        if capacity is None:
            capacity = self.types[type_id] = TypeCapacity()
        return capacity

    def _collect_nodes(self) -> None:
        for facts in self.model.nodes.values():
            if not facts.accelerator_type:
                continue
            capacity = self._capacity(facts.accelerator_type)
            if facts.unschedulable:
                continue
            used = self.node_used.get(facts.name, {})
            whole_key = whole_resource(facts)
            whole_alloc = facts.allocatable.get(whole_key, ZERO)
            whole_used = used.get(whole_key, ZERO)
            if facts.type_source == "dra" and facts.dra is not None:
                # DRA devices: what allocated ResourceClaims hold is the truth, whoever's pods they serve.
                self._add_dra(capacity, facts)
                continue
            if facts.mig_profiles and facts.mig_ready:
                self._add_mig(capacity, facts, used)
            if facts.sharing in SHARED_MODES:
                replicas = max(1, facts.replicas)
                bucket = capacity.shared.setdefault(facts.sharing, Bucket())
                bucket.total += facts.gpu_count
                bucket.allocatable += whole_alloc / replicas
                bucket.used += whole_used / replicas
                bucket.nodes += 1
                bucket.min_replicas = min(bucket.min_replicas or replicas, replicas)
            elif facts.mig_strategy in ("single", "gke") and facts.mig_profiles:
                continue  # nvidia.com/gpu counts MIG slices here, already in the MIG bucket
            elif whole_alloc > 0 or not facts.mig_profiles:
                # On a MIG mixed node only the unpartitioned GPUs are whole GPUs.
                capacity.whole.total += whole_alloc if facts.mig_profiles else Decimal(facts.gpu_count)
                capacity.whole.allocatable += whole_alloc
                capacity.whole.used += whole_used
                capacity.whole.nodes += 1

    @staticmethod
    def _add_dra(capacity: TypeCapacity, facts: NodeFacts) -> None:
        # Tainted devices are not allocatable; what cannot be allocated now (allocated, a partition whose
        # counters are taken) is used (webhook/dra/facts.py).
        assert facts.dra is not None
        allocatable = dra_allocatable(facts)
        used = dra_used(facts)
        if facts.dra.gpus:
            capacity.whole.total += len(facts.dra.gpus)
            capacity.whole.allocatable += allocatable.get(DRA_GPUS, ZERO)
            capacity.whole.used += used.get(DRA_GPUS, ZERO)
            capacity.whole.nodes += 1
        for profile, count in facts.dra.mig_capacity().items():
            bucket = capacity.mig.setdefault(profile, Bucket())
            bucket.total += count
            bucket.allocatable += allocatable.get(DRA_MIG_PREFIX + profile, ZERO)
            bucket.used += used.get(DRA_MIG_PREFIX + profile, ZERO)
            bucket.nodes += 1

    @staticmethod
    def _add_mig(capacity: TypeCapacity, facts: NodeFacts, used: dict[str, Decimal]) -> None:
        for profile, count in facts.mig_profiles.items():
            key = GPU_RESOURCE if facts.mig_strategy in ("single", "gke") else MIG_RESOURCE_PREFIX + profile
            bucket = capacity.mig.setdefault(profile, Bucket())
            bucket.total += count
            bucket.allocatable += facts.allocatable.get(key, Decimal(count))
            bucket.used += used.get(key, ZERO)
            bucket.nodes += 1

    # -- profile arithmetic ---------------------------------------------------------------------
    def profile_counts(self, type_id: str, sharing: dict[str, Any]) -> tuple[Decimal, Decimal, Decimal]:
        """(total, available, pending) of one type under a profile's sharing mode."""
        capacity = self.types.get(type_id)
        if capacity is None:
            return ZERO, ZERO, ZERO
        mode = str(sharing.get("mode") or "exclusive")
        if mode == "mig":
            profile = str(sharing.get("migProfile") or "")
            bucket = capacity.mig.get(profile, Bucket())
            return bucket.total, bucket.available, capacity.pending_mig.get(profile, ZERO)
        if mode in SHARED_MODES:
            bucket = capacity.shared.get(mode, Bucket())
            pending = capacity.pending_whole / max(1, bucket.min_replicas or 1)
            return bucket.total, bucket.available, pending
        return capacity.whole.total, capacity.whole.available, capacity.pending_whole
