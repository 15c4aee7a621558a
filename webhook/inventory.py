"""The read-only inventory views (`/api/v1/hardware-profiles`, `/nodes`, `/tenants`, `kgwe costs`).

One pass over the snapshot's nodes and pods (`Inventory.build`, O(nodes + pods)) collects everything the
views need into per-type and per-node indexes; a view then costs O(types + profiles) (the node view
O(nodes), as it lists them). `InventoryCache` keeps one `Inventory` and the rendered views per snapshot
generation and configuration, so concurrent callers get the same bytes.

Units: a whole-GPU or shared (MPS, time-slicing) bucket counts physical GPUs, a shared node's replicas
divided by its replicas per GPU; a MIG bucket counts slices of its profile. `available` is what the node
allocates minus what bound unfinished pods request; `pending` is what unbound unfinished pods ask on a
type named by their `kgwe.io/accelerator-type` annotation (a pod that may land on several types counts
on each). Cordoned nodes hold no capacity. See docs/inventory.md.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation
from typing import Any

from policies.background import Task
from policies.gpu_demand import GpuDemand, mig_compute_slices, pod_gpu_demand
from policies.quota.check import UsageLine, usage_lines
from policies.quota.model import (
    PodCharge,
    format_memory,
    quota_name,
    resolve_tenant,
    tenant_of_quota,
)
from policies.vocabulary import resources
from policies.vocabulary.accelerator_types import MIXED, UNKNOWN
from policies.vocabulary.objects import PodView
from webhook.admission.charging import pod_charge
from webhook.cluster.model import ClusterModel
from webhook.cluster.node_facts import GPU_RESOURCE, GPU_RESOURCE_PREFIXES, MIG_RESOURCE_PREFIX, NodeFacts
from webhook.config import Config
from webhook.costs import format_hourly_cost, parse_hourly_cost, pod_hourly_cost, price_per_gpu_hour
from webhook.dra.facts import dra_allocatable, dra_used
from webhook.intent import OUT_ACCELERATOR_TYPE, OUT_HOURLY_COST, OUT_TENANT

log = logging.getLogger("kgwe.inventory")

ZERO = Decimal(0)
# 365 * 24 / 12: the month OpenCost and cloud price lists use.
HOURS_PER_MONTH = Decimal(730)
SHARED_MODES = ("mps", "time-slicing")
# Node label prefixes the node view shows; everything else (and every annotation) stays hidden.
SHOWN_LABEL_PREFIXES = ("kgwe.io/", "nvidia.com/", "topology.kubernetes.io/")


def number(value: Decimal) -> int | float:
    """A JSON number: an int when whole, else rounded to 2 decimal places."""
    if value == value.to_integral_value():
        return int(value)
    return round(float(value), 2)


def price_text(value: Decimal) -> str:
    """Prices as decimal strings with at least two decimals: 4.5 -> "4.50", 0.625 -> "0.625"."""
    exponent = value.normalize().as_tuple().exponent
    if isinstance(exponent, int) and exponent >= -2:
        return f"{value:.2f}"
    return format(value.normalize(), "f")


def money_text(value: Decimal) -> str:
    """An amount of money: rounded like cost annotations (4 places), shown with at least two decimals."""
    return price_text(Decimal(format_hourly_cost(value)))


def utc_stamp(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


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


@dataclass(frozen=True)
class PodCost:
    namespace: str
    name: str
    tenant: str
    type_id: str
    hourly: Decimal | None  # None: no price known for the pod's type
    source: str  # annotation | computed | unpriced


def _gpu_resources(facts: NodeFacts) -> dict[str, Decimal]:
    found = {k: v for k, v in facts.allocatable.items() if k.startswith(GPU_RESOURCE_PREFIXES)}
    return {**found, **dra_allocatable(facts)}


def _whole_resource(facts: NodeFacts | None) -> str:
    if facts is not None and resources.AMD_GPU in facts.allocatable and GPU_RESOURCE not in facts.allocatable:
        return resources.AMD_GPU
    return GPU_RESOURCE


def demand_resources(demand: GpuDemand, facts: NodeFacts | None) -> dict[str, Decimal]:
    """A pod's GPU demand as the node's resource names (what it takes from the node's allocatable)."""
    out: dict[str, Decimal] = {}
    if demand.whole_gpus:
        out[_whole_resource(facts)] = Decimal(demand.whole_gpus)
    for profile, count in demand.mig.items():
        out[MIG_RESOURCE_PREFIX + profile] = Decimal(count)
    for key, amount in demand.other.items():
        out[key] = out.get(key, ZERO) + amount
    return out


class Inventory:
    """The per-snapshot precompute behind every view."""

    def __init__(self, model: ClusterModel, config: Config, now: datetime | None = None) -> None:
        self.model = model
        self.config = config
        self.generated_at = now or datetime.now(UTC)
        self.node_used: dict[str, dict[str, Decimal]] = {}
        self.node_gpu_pods: dict[str, int] = {}  # unfinished GPU pods bound to each node
        self.types: dict[str, TypeCapacity] = {}
        self.charges: list[PodCharge] = []
        self.pod_costs: list[PodCost] = []
        self.namespace_tenants: dict[str, str] = {}
        self._collect_pods()
        self._collect_nodes()

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
        for raw in model.pods.values():
            pod = PodView(raw)
            if pod.terminal:
                continue
            demand = pod_gpu_demand(pod)
            if not demand.asks_gpu:
                continue
            notes = pod.annotations
            node_name = pod.node_name
            facts = model.nodes.get(node_name) if node_name else None
            if node_name:
                self.node_gpu_pods[node_name] = self.node_gpu_pods.get(node_name, 0) + 1
                used = self.node_used.setdefault(node_name, {})
                for key, amount in demand_resources(demand, facts).items():
                    used[key] = used.get(key, ZERO) + amount
            else:
                for type_id in notes.get(OUT_ACCELERATOR_TYPE, "").split(","):
                    if type_id in model.types:
                        capacity = self._capacity(type_id)
                        capacity.pending_whole += demand.whole_gpus
                        for profile, count in demand.mig.items():
                            capacity.pending_mig[profile] = capacity.pending_mig.get(profile, ZERO) + count
            charge = pod_charge(pod, model, None)
            if charge is not None:
                self.charges.append(charge)
            if node_name:
                self.pod_costs.append(self._pod_cost(pod, notes, facts, charge))

    def _pod_cost(
        self, pod: PodView, notes: Mapping[str, str], facts: NodeFacts | None, charge: PodCharge | None
    ) -> PodCost:
        namespace = pod.namespace
        tenant = notes.get(OUT_TENANT) or self._tenant_of_namespace(namespace)
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
        return PodCost(namespace, pod.name, tenant, type_id, hourly, source)

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
            whole_key = _whole_resource(facts)
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
        assert facts.dra is not None
        if facts.dra.gpus:
            capacity.whole.total += len(facts.dra.gpus)
            capacity.whole.allocatable += len(facts.dra.gpus)
            capacity.whole.used += facts.dra.allocated_gpus()
            capacity.whole.nodes += 1
        allocated = facts.dra.allocated_mig()
        for profile, count in facts.dra.mig_profiles().items():
            bucket = capacity.mig.setdefault(profile, Bucket())
            bucket.total += count
            bucket.allocatable += count
            bucket.used += allocated.get(profile, 0)
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


# -- views -------------------------------------------------------------------------------------


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _profile_sharing(spec: dict[str, Any]) -> dict[str, Any]:
    raw = _mapping(spec.get("sharing"))
    mode = str(raw.get("mode") or "exclusive")
    out: dict[str, Any] = {"mode": mode}
    if mode == "mig" and raw.get("migProfile"):
        out["migProfile"] = str(raw["migProfile"])
    if mode == "mps" and raw.get("gpuFraction") is not None:
        fraction = _decimal(raw["gpuFraction"])
        if fraction is not None:
            out["gpuFraction"] = float(fraction)
    return out


def _decimal(value: Any) -> Decimal | None:
    try:
        return Decimal(str(value)) if value is not None else None
    except InvalidOperation:
        return None


def profile_price(spec: dict[str, Any], config: Config) -> Decimal | None:
    """The profile's price, else the configured price of its first type."""
    own = _decimal(spec.get("pricePerGPUHour"))
    if own is not None:
        return own
    types = [str(t) for t in spec.get("acceleratorTypes") or []]
    return config.price_per_gpu_hour(types[0]) if types else None


def unit_price_of(
    price: Decimal | None, sharing: dict[str, Any], model: ClusterModel, types: list[str]
) -> tuple[Decimal | None, str]:
    """(price per hour of what one pod unit of the profile gets, what that unit is), by the cost rule of
    docs/costs.md: a MIG slice is its compute slices / 7 of a GPU, an MPS share its gpuFraction."""
    mode = sharing.get("mode")
    if mode == "mig" and sharing.get("migProfile"):
        name = str(sharing["migProfile"])
        slices = next((p.compute_slices for t in types if (a := model.table.get(t)) for p in a.mig_profiles
                       if p.name == name), None)
        if slices is None:
            return None, f"MIG {name} slice"
        share = Decimal(slices) / 7
        return (price * share if price is not None else None), f"MIG {name} slice ({slices}/7 GPU)"
    if mode == "mps" and sharing.get("gpuFraction") is not None:
        fraction = Decimal(str(sharing["gpuFraction"]))
        return (price * fraction if price is not None else None), f"MPS share ({number(fraction)} GPU)"
    if mode == "time-slicing":
        return None, "time-sliced replica (priced per node: 1 / its replicas)"
    return price, "GPU"


def hardware_profiles_view(inventory: Inventory) -> dict[str, Any]:
    model, config = inventory.model, inventory.config
    profiles = []
    for name in sorted(model.hardware_profiles):
        obj = model.hardware_profiles[name]
        spec = _mapping(obj.get("spec"))
        sharing = _profile_sharing(spec)
        display = str(spec.get("displayName") or name)
        rows = []
        totals = [ZERO, ZERO, ZERO]
        for type_id in (str(t) for t in spec.get("acceleratorTypes") or []):
            accel = model.table.get(type_id)
            counts = inventory.profile_counts(type_id, sharing)
            totals = [a + b for a, b in zip(totals, counts, strict=True)]
            rows.append({
                "id": type_id,
                "productName": accel.product_name if accel else None,
                "memoryGB": model.table.memory_gb(type_id),
                "architecture": accel.architecture if accel else None,
                "total": number(counts[0]),
                "available": number(counts[1]),
                "pending": number(counts[2]),
            })
        price = profile_price(spec, config)
        unit_price, unit = unit_price_of(price, sharing, model, [str(t) for t in spec.get("acceleratorTypes") or []])
        products = ", ".join(str(r["productName"] or r["id"]) for r in rows) or "no accelerator types"
        profiles.append({
            "name": name,
            "displayName": display,
            "description": str(spec.get("description") or ""),
            "sharing": sharing,
            "pricePerGPUHour": price_text(price) if price is not None else None,
            # What a pod of this profile gets and pays per hour: a MIG slice or MPS share, not a whole GPU.
            "pricePerUnitHour": money_text(unit_price) if unit_price is not None else None,
            "unit": unit,
            "acceleratorTypes": rows,
            "total": number(totals[0]),
            "available": number(totals[1]),
            "pending": number(totals[2]),
            "summary": f"{display} ({products}) - {number(totals[1])} available",
        })
    return {"generatedAt": utc_stamp(inventory.generated_at), "currency": config.pricing.currency, "profiles": profiles}


def _fully_mig(facts: NodeFacts) -> bool:
    """Every GPU of the node is MIG-partitioned: MIG devices and no whole GPU to give a pod."""
    if not facts.mig_profiles:
        return False
    if facts.mig_strategy in ("single", "gke"):
        return True
    return facts.allocatable.get("nvidia.com/gpu", ZERO) <= 0


def _node_row(inventory: Inventory, facts: NodeFacts, elapsed: float) -> dict[str, Any]:
    model = inventory.model
    type_id = facts.accelerator_type or None
    accel = model.table.get(facts.accelerator_type) if facts.is_typed else None
    memory = facts.gpu_memory_mib
    if memory is None and facts.topology is not None and facts.topology.gpus:
        memory = facts.topology.gpus[0].memory_mib
    used = inventory.node_used.get(facts.name, {})
    if facts.type_source == "dra":
        used = dra_used(facts)
    age = facts.topology_age_seconds
    return {
        "name": facts.name,
        "acceleratorType": type_id,
        "productName": accel.product_name if accel else None,
        "typeSource": facts.type_source,
        "gpus": facts.gpu_count,
        "memoryMiB": memory,
        "architecture": accel.architecture if accel else facts.labels.get("nvidia.com/gpu.family"),
        "mig": {"strategy": facts.mig_strategy, "ready": facts.mig_ready, "profiles": dict(facts.mig_profiles)},
        "sharing": {"strategy": facts.sharing, "replicas": facts.replicas},
        # A GPU in MIG mode cannot use NVLink (docs/topology.md): a node with no whole GPU left has no domain.
        "nvlinkDomainSize": 0 if _fully_mig(facts) else facts.nvlink_domain_size,
        "clique": facts.clique,
        "labels": {k: v for k, v in facts.labels.items() if k.startswith(SHOWN_LABEL_PREFIXES)},
        "allocatable": {k: number(v) for k, v in _gpu_resources(facts).items()},
        "used": {k: number(v) for k, v in used.items()},
        "pods": inventory.node_gpu_pods.get(facts.name, 0),
        "unschedulable": facts.unschedulable,
        "taints": [{"key": t.key, "value": t.value, "effect": t.effect} for t in facts.taints],
        "topology": {
            "present": facts.topology is not None,
            "ageSeconds": round(age + elapsed, 1) if age is not None else None,
            "stale": facts.topology_stale,
        },
        "notes": list(facts.notes),
    }


def nodes_view(inventory: Inventory) -> dict[str, Any]:
    model = inventory.model
    elapsed = max(0.0, time.monotonic() - model.built_at)
    nodes = [_node_row(inventory, model.nodes[name], elapsed) for name in sorted(model.nodes)]
    types = []
    for type_id in sorted(model.types, key=lambda t: (t in (UNKNOWN, MIXED), t)):
        summary = model.types[type_id]
        accel = model.table.get(type_id)
        capacity = inventory.types.get(type_id, TypeCapacity())
        shared = list(capacity.shared.values())
        types.append({
            "id": type_id,
            "productName": accel.product_name if accel else None,
            "nodes": len(summary.nodes),
            "gpus": summary.gpus_total,
            "available": number(capacity.equivalents_available()),
            # The same capacity counted as what pods get: whole GPUs (physical, MPS and time-slicing
            # replicas folded back), and MIG slices as slices per profile, never as fractions of a GPU.
            "wholeGpus": number(capacity.whole.allocatable + sum((b.allocatable for b in shared), ZERO)),
            "wholeAvailable": number(capacity.whole.available + sum((b.available for b in shared), ZERO)),
            "slices": {
                profile: {"available": number(bucket.available), "total": number(bucket.allocatable)}
                for profile, bucket in sorted(capacity.mig.items())
            },
        })
    return {"generatedAt": utc_stamp(inventory.generated_at), "nodes": nodes, "types": types}


def _limit_row(line: UsageLine) -> dict[str, Any]:
    return {
        "kind": line.key.kind,
        "name": line.key.name,
        "quota": line.quota,
        "gpus": number(line.limit_gpus) if line.limit_gpus is not None else None,
        "used": number(line.used_gpus),
        "gpuMemory": format_memory(line.limit_memory) if line.limit_memory is not None else None,
        "usedMemory": format_memory(line.used_memory) if line.limit_memory is not None else None,
    }


def tenant_usage(inventory: Inventory) -> dict[str, list[UsageLine]]:
    """Use against every limit, per tenant that has a TenantQuota."""
    quotas_by_tenant: dict[str, list[dict[str, Any]]] = {}
    for quota in sorted(inventory.model.tenant_quotas.values(), key=quota_name):
        quotas_by_tenant.setdefault(tenant_of_quota(quota), []).append(quota)
    price_of = inventory.config.price_per_gpu_hour
    return {
        tenant: usage_lines(tenant, quotas, inventory.charges, price_of)
        for tenant, quotas in quotas_by_tenant.items()
    }


def tenants_view(inventory: Inventory) -> dict[str, Any]:
    model = inventory.model
    usage = tenant_usage(inventory)
    records: dict[str, dict[str, Any]] = {}

    def record(tenant: str) -> dict[str, Any]:
        if tenant not in records:
            records[tenant] = {"quotas": set(), "namespaces": set(), "groups": set(), "cost": ZERO, "pods": 0}
        return records[tenant]

    for quota in model.tenant_quotas.values():
        spec = _mapping(quota.get("spec"))
        entry = record(tenant_of_quota(quota))
        entry["quotas"].add(quota_name(quota))
        entry["namespaces"].update(str(n) for n in spec.get("namespaces") or [])
        entry["groups"].update(str(g) for g in spec.get("groups") or [])
    for namespace, tenant in inventory.namespace_tenants.items():
        if tenant in records:
            records[tenant]["namespaces"].add(namespace)
    for cost in inventory.pod_costs:
        entry = record(cost.tenant)
        entry["namespaces"].add(cost.namespace)
        entry["cost"] += cost.hourly or ZERO
        entry["pods"] += 1
    tenants = [
        {
            "tenant": tenant,
            "quotas": sorted(entry["quotas"]),
            "namespaces": sorted(entry["namespaces"]),
            "groups": sorted(entry["groups"]),
            "limits": [_limit_row(line) for line in usage.get(tenant, [])],
            "hourlyCost": money_text(entry["cost"]),
            "pods": entry["pods"],
        }
        for tenant, entry in sorted(records.items())
    ]
    return {"generatedAt": utc_stamp(inventory.generated_at), "currency": inventory.config.pricing.currency,
            "tenants": tenants}


def costs_view(inventory: Inventory) -> dict[str, Any]:
    """Chargeback: the hourly rate now, by tenant and accelerator type, from the pods running now."""
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    for cost in inventory.pod_costs:
        row = rows.setdefault(
            (cost.tenant, cost.type_id),
            {"tenant": cost.tenant, "acceleratorType": cost.type_id, "pods": 0, "unpricedPods": 0, "cost": ZERO},
        )
        row["pods"] += 1
        if cost.hourly is None:
            row["unpricedPods"] += 1
        else:
            row["cost"] += cost.hourly
    total = sum((row["cost"] for row in rows.values()), ZERO)
    out_rows = []
    for key in sorted(rows):
        row = rows[key]
        cost = row.pop("cost")
        row["hourlyCost"] = money_text(cost)
        row["dailyCost"] = money_text(cost * 24)
        row["monthlyCost"] = money_text(cost * HOURS_PER_MONTH)
        out_rows.append(row)
    return {
        "generatedAt": utc_stamp(inventory.generated_at),
        "currency": inventory.config.pricing.currency,
        "rows": out_rows,
        "hourlyCost": money_text(total),
        "pods": [
            {"namespace": c.namespace, "pod": c.name, "tenant": c.tenant, "acceleratorType": c.type_id,
             "hourlyCost": money_text(c.hourly) if c.hourly is not None else None, "source": c.source}
            for c in sorted(inventory.pod_costs, key=lambda c: (c.namespace, c.name))
        ],
    }


# -- cache -------------------------------------------------------------------------------------

View = Callable[[Inventory], dict[str, Any]]


class InventoryCache:
    """One `Inventory` and its rendered views per (snapshot generation, configuration).

    A changed snapshot is picked up `refresh_seconds` after the last build, or `build_share` times the
    last build's duration when that is longer (so rebuilds of a large, busy cluster take at most about
    1 / (1 + build_share) of a CPU), never later than `max_age_seconds`: a busy watch stream does not
    make every request pay the O(nodes + pods) precompute. An unchanged snapshot is rebuilt
    after `max_age_seconds` so `generatedAt` and topology ages stay fresh. With `background` (the
    server's setting) the rebuild runs on a thread and callers keep getting the previous answer until
    the new one, with every view asked for so far rendered, replaces it: no request waits for a
    rebuild except the very first and the first after the cache sat unused for `max_age_seconds`,
    which is built at once from `fresh_model_source` (a snapshot rebuilt now when the cluster changed):
    a person opening the page after a pause sees the cluster as it is, not as it was minutes ago.
    """

    def __init__(
        self,
        model_source: Callable[[], ClusterModel],
        config_source: Callable[[], Config],
        *,
        refresh_seconds: float = 1.0,
        max_age_seconds: float = 30.0,
        build_share: float = 4.0,
        background: bool = True,
        fresh_model_source: Callable[[], ClusterModel] | None = None,
    ) -> None:
        self._model_source = model_source
        self._fresh_model_source = fresh_model_source or model_source
        self._config_source = config_source
        self.refresh_seconds = refresh_seconds
        self.max_age_seconds = max_age_seconds
        self.build_share = build_share
        self.background = background
        self.last_build_seconds = 0.0
        self._lock = threading.Lock()
        self._state: tuple[Inventory, dict[str, Any]] | None = None
        self._key: tuple[int, int] | None = None
        self._built = 0.0
        self._views: dict[str, tuple[View, Callable[[dict[str, Any]], Any]]] = {}
        # On demand (with `background`): a read that finds the answer stale wakes it and keeps the previous
        # answer; a failed rebuild waits for the next read's wake.
        self._rebuilder = Task("inventory-rebuild", self._rebuild_wanted, interval=None,
                               on_error=lambda _exc: log.exception("rebuilding the inventory failed"))

    def _wanted_key(self) -> tuple[tuple[int, int], ClusterModel, Config] | None:
        """The snapshot and configuration to build from, or None while the current build is good."""
        age = time.monotonic() - self._built
        interval = min(self.max_age_seconds, max(self.refresh_seconds, self.build_share * self.last_build_seconds))
        if self._state is not None and age < interval:
            return None
        model = self._model_source()
        config = self._config_source()
        key = (model.generation, id(config))
        if self._state is not None and key == self._key and age < self.max_age_seconds:
            return None
        return key, model, config

    def _build(self, model: ClusterModel, config: Config) -> tuple[Inventory, dict[str, Any]]:
        started = time.perf_counter()
        inventory = Inventory(model, config)
        rendered = {name: render(build(inventory)) for name, (build, render) in list(self._views.items())}
        self.last_build_seconds = time.perf_counter() - started
        return inventory, rendered

    def _install(self, key: tuple[int, int], state: tuple[Inventory, dict[str, Any]]) -> None:
        self._state = state
        self._key = key
        self._built = time.monotonic()

    def _rebuild_wanted(self) -> None:
        """The `inventory-rebuild` task's body: build from the snapshot and configuration wanted now, if any
        (a wake that came while the previous build ran finds nothing left to do)."""
        wanted = self._wanted_key()
        if wanted is None:
            return
        key, model, config = wanted
        state = self._build(model, config)
        with self._lock:
            self._install(key, state)

    def _current(self) -> tuple[Inventory, dict[str, Any]]:
        wanted = self._wanted_key()
        state = self._state
        if wanted is None and state is not None:
            return state
        idle = time.monotonic() - self._built >= self.max_age_seconds
        if state is not None and self.background and wanted is not None and not idle:
            self._rebuilder.wake()
            return state
        with self._lock:
            wanted = self._wanted_key()
            if wanted is not None:
                key, model, config = wanted
                if idle:
                    model = self._fresh_model_source()
                    key = (model.generation, key[1])
                self._install(key, self._build(model, config))
            assert self._state is not None
            return self._state

    def inventory(self) -> Inventory:
        return self._current()[0]

    def view(self, name: str, build: View, render: Callable[[dict[str, Any]], Any] = lambda doc: doc) -> Any:
        """`render(build(inventory))`, computed once per inventory and shared by every caller."""
        self._views.setdefault(name, (build, render))
        inventory, rendered = self._current()
        cached = rendered.get(name)
        if cached is None:
            with self._lock:
                cached = rendered.get(name)
                if cached is None:
                    cached = rendered[name] = render(build(inventory))
        return cached
