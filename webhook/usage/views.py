"""Usage, recommendations and idle GPUs put together with the cluster model and the configuration: what
`kgwe recommend`, `/api/v1/recommendations` and `/api/v1/idle` answer (documents as typed models).

The cluster model says what a pod asks, who owns it and which tenant pays; a pod the model does not have
(finished, or a cluster read from a directory without it) is described from what the DCGM exporter saw
it hold. Costs follow SPEC section 6 (webhook/costs.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel

from policies.gpu_demand import pod_gpu_demand
from policies.quota.model import resolve_tenant
from policies.vocabulary import keys
from policies.vocabulary.accelerator_types import UNKNOWN, AcceleratorTable
from policies.vocabulary.objects import PodView
from webhook.cluster.model import ClusterModel
from webhook.config import Config
from webhook.costs import parse_hourly_cost, price_per_gpu_hour
from webhook.intent import OUT_ACCELERATOR_TYPE, OUT_HOURLY_COST, OUT_TENANT
from webhook.inventory.numbers import money_text, number
from webhook.usage.decay import Decay
from webhook.usage.history import PodHistory, PodKey, UsageHistory
from webhook.usage.idle import idle_pod
from webhook.usage.recommend import Ask, Recommendation, group, recommend
from webhook.usage.shapes import MIB_PER_GB, Shape, cluster_shapes
from webhook.workload_owners import WorkloadRef, workload_of


class _Doc(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, frozen=True)


class WorkloadDoc(_Doc):
    kind: str
    namespace: str
    name: str
    part: str = ""
    source: str  # pod | name


class ShapeDoc(_Doc):
    shape: str
    accelerator_type: str
    sharing: str  # exclusive | mig | mps
    gpus: int
    mig_profile: str | None = None
    gpu_fraction: float | None = None
    memory_mib: int
    gpu_equivalents: float
    hourly_cost: str | None


class RecommendedDoc(ShapeDoc):
    intent: dict[str, str]


class SavedDoc(_Doc):
    gpu_equivalents_per_pod: float
    hourly_per_pod: str | None
    gpu_equivalents: float  # per pod times the pods holding GPUs now
    hourly: str | None


class RecommendationDoc(_Doc):
    key: str
    workload: WorkloadDoc
    pods: int
    pods_now: int
    history_hours: float
    asks: ShapeDoc
    peak_memory_mib: int
    memory_percentile_mib: int
    target_memory_mib: int
    peak_total_memory_mib: int | None
    engine_activity_p95: float | None
    recommended: RecommendedDoc
    change: bool
    saved: SavedDoc
    confidence: float
    confidence_level: str
    notes: list[str]


class IdleDoc(_Doc):
    namespace: str
    pod: str
    workload: str
    tenant: str
    node: str
    accelerator_type: str
    gpus: int
    gpu_equivalents: float
    hourly_cost: str | None
    idle_hours: float
    highest_engine_activity: float


@dataclass
class UsageReport:
    """Everything worked out from one read of the history."""

    recommendations: list[Recommendation] = field(default_factory=list)
    without_history: list[WorkloadRef] = field(default_factory=list)
    idle: list[IdleDoc] = field(default_factory=list)
    currency: str = "USD"
    end: float = 0.0
    queries: int = 0


def pod_owners(history: UsageHistory, model: ClusterModel | None) -> dict[PodKey, WorkloadRef]:
    pods = model.pods if model is not None else {}
    return {key: workload_of(key[0], key[1], pods.get(f"{key[0]}/{key[1]}")) for key in history.pods}


def _ask_from_pod(raw: dict[str, Any], exported: Ask | None, model: ClusterModel, config: Config,
                  table: AcceleratorTable) -> Ask | None:
    pod = PodView(raw)
    demand = pod_gpu_demand(pod)
    if not demand.asks_gpu:
        return exported
    facts = model.nodes.get(pod.node_name) if pod.node_name else None
    asked_types = [t for t in pod.annotations.get(OUT_ACCELERATOR_TYPE, "").split(",") if t]
    if facts is not None and facts.is_typed:
        type_id = facts.accelerator_type
    elif exported is not None and exported.shape.type_id != UNKNOWN:
        type_id = exported.shape.type_id
    else:
        type_id = asked_types[0] if asked_types else UNKNOWN
    price = price_per_gpu_hour(pod, type_id, model, config)
    memory_gb = table.memory_gb(type_id) or 0
    if demand.mig:
        profile, count = sorted(demand.mig.items())[0]
        info = table.get(type_id).mig_profile(profile) if table.get(type_id) else None  # type: ignore[union-attr]
        gb = info.memory_gb if info else memory_gb
        slices = info.compute_slices if info else 7
        return Ask(Shape("mig", type_id, gb * MIB_PER_GB, slices / 7, gpus=sum(demand.mig.values()) or count,
                         profile=profile, price=price), "pod")
    mps = (facts.sharing == "mps") if facts is not None else pod.annotation(keys.SHARING) == "mps"
    if mps:
        fraction = _fraction(pod.annotation(keys.GPU_FRACTION)) or (
            Decimal(1) / max(1, facts.replicas) if facts is not None else Decimal(1))
        return Ask(Shape("mps", type_id, float(fraction) * memory_gb * MIB_PER_GB, float(fraction),
                         gpus=max(1, demand.whole_gpus), fraction=fraction, price=price), "pod")
    return Ask(Shape("gpu", type_id, memory_gb * MIB_PER_GB, 1.0, gpus=max(1, demand.whole_gpus), price=price), "pod")


def _fraction(raw: str | None) -> Decimal | None:
    try:
        value = Decimal(str(raw).strip()) if raw is not None else None
    except ArithmeticError:
        return None
    return value if value is not None and value.is_finite() and 0 < value <= 1 else None


def _ask_from_exporter(pod: PodHistory, config: Config, table: AcceleratorTable,
                       known: dict[tuple[str, str, int], Ask | None]) -> Ask | None:
    """What the exporter saw the pod hold, as an ask (`known`: the asks already made, by what was held)."""
    model_name, profile = pod.devices.main_model()
    count = pod.devices.models.get((model_name, profile), 0)
    held = (model_name, profile, count)
    if held not in known:
        known[held] = _exported_ask(model_name, profile, count, config, table)
    return known[held]


def _exported_ask(model_name: str, profile: str, count: int, config: Config, table: AcceleratorTable) -> Ask | None:
    if not count:
        return None
    type_id = table.from_product(model_name) if model_name else UNKNOWN
    price = config.price_per_gpu_hour(type_id)
    memory_gb = table.memory_gb(type_id) or 0
    if profile:
        accel = table.get(type_id)
        info = accel.mig_profile(profile) if accel is not None else None
        slices = info.compute_slices if info else int(profile.split("g.")[0] or 7)
        gb = info.memory_gb if info else memory_gb
        return Ask(Shape("mig", type_id, gb * MIB_PER_GB, slices / 7, gpus=count, profile=profile, price=price),
                   "exporter")
    return Ask(Shape("gpu", type_id, memory_gb * MIB_PER_GB, 1.0, gpus=count, price=price), "exporter")


def pod_asks(history: UsageHistory, model: ClusterModel | None, config: Config) -> dict[PodKey, Ask]:
    table = model.table if model is not None else config.accelerator_table()
    asks: dict[PodKey, Ask] = {}
    known: dict[tuple[str, str, int], Ask | None] = {}
    for key, pod in history.pods.items():
        exported = _ask_from_exporter(pod, config, table, known)
        raw = model.pods.get(f"{key[0]}/{key[1]}") if model is not None else None
        ask = _ask_from_pod(raw, exported, model, config, table) if raw is not None and model is not None else exported
        if ask is not None:
            asks[key] = ask
    return asks


def _vendors(model: ClusterModel | None, config: Config, type_ids: set[str]) -> dict[str, str]:
    table = model.table if model is not None else config.accelerator_table()
    out: dict[str, str] = {}
    for type_id in type_ids:
        accel = table.get(type_id)
        out[type_id] = accel.vendor if accel is not None else type_id.split("-", 1)[0]
    return out


def build_report(history: UsageHistory, model: ClusterModel | None, config: Config) -> UsageReport:
    """Recommendations for every workload of the history, and its idle pods."""
    settings = config.rightsizing
    newest, step = history.grid.end, history.grid.step
    owners = pod_owners(history, model)
    asks = pod_asks(history, model, config)
    shapes = cluster_shapes(model, config) if model is not None else []
    vendor_of = _vendors(model, config, {s.type_id for s in shapes} | {a.shape.type_id for a in asks.values()})
    report = UsageReport(currency=config.pricing.currency, end=newest, queries=history.queries)
    decay = Decay(newest, settings.half_life_seconds, history.grid.start, step)
    for pooled in group(history.pods.values(), owners, asks):
        found = recommend(pooled, shapes, vendor_of, settings, step, newest, decay)
        if found is None:
            report.without_history.append(pooled.workload)
        else:
            report.recommendations.append(found)
    tenants = _Tenants(model, config)
    for key in sorted(history.pods):
        pod = history.pods[key]
        found_idle = idle_pod(pod, settings, newest, step)
        ask = asks.get(key)
        if found_idle is None or ask is None:
            continue
        tenant, hourly = tenants.of(key, ask)
        report.idle.append(IdleDoc(
            namespace=key[0], pod=key[1], workload=owners[key].key, tenant=tenant, node=pod.devices.host,
            accelerator_type=ask.shape.type_id, gpus=ask.shape.gpus,
            gpu_equivalents=number(ask.shape.equivalents),
            hourly_cost=money_text(hourly) if hourly is not None else None,
            idle_hours=round(found_idle.idle_seconds / 3600, 2),
            highest_engine_activity=round(found_idle.highest, 4),
        ))
    return report


class _Tenants:
    """Tenant and hourly cost of a pod: its annotations when the cluster has it, else its namespace's
    tenant and the cost of what the exporter saw it hold."""

    def __init__(self, model: ClusterModel | None, config: Config) -> None:
        self.model, self.config = model, config
        self._by_namespace: dict[str, str] = {}

    def _namespace_tenant(self, namespace: str) -> str:
        if self.model is None:
            return namespace
        if namespace not in self._by_namespace:
            tenant, _ = resolve_tenant(namespace, self.model.namespace_labels(namespace), [],
                                       list(self.model.tenant_quotas.values()))
            self._by_namespace[namespace] = tenant
        return self._by_namespace[namespace]

    def of(self, key: PodKey, ask: Ask) -> tuple[str, Decimal | None]:
        raw = self.model.pods.get(f"{key[0]}/{key[1]}") if self.model is not None else None
        notes = PodView(raw).annotations if raw is not None else {}
        tenant = notes.get(OUT_TENANT) or self._namespace_tenant(key[0])
        stated = parse_hourly_cost(notes.get(OUT_HOURLY_COST))
        return tenant, stated if stated is not None else ask.hourly


def _shape_doc(shape: Shape) -> dict[str, Any]:
    hourly = shape.hourly
    return {
        "shape": shape.describe(), "accelerator_type": shape.type_id,
        "sharing": {"gpu": "exclusive"}.get(shape.kind, shape.kind), "gpus": shape.gpus,
        "mig_profile": shape.profile or None,
        "gpu_fraction": float(shape.fraction) if shape.kind == "mps" and shape.fraction is not None else None,
        "memory_mib": int(shape.memory_mib), "gpu_equivalents": number(shape.equivalents),
        "hourly_cost": money_text(hourly) if hourly is not None else None,
    }


def recommendation_doc(found: Recommendation) -> RecommendationDoc:
    ref = found.workload
    per_pod = found.hourly_saved_per_pod
    pods_now = Decimal(found.pods_now)
    return RecommendationDoc(
        key=ref.key,
        workload=WorkloadDoc(kind=ref.kind, namespace=ref.namespace, name=ref.name, part=ref.part, source=ref.source),
        pods=found.pods, pods_now=found.pods_now, history_hours=round(found.history_seconds / 3600, 2),
        asks=ShapeDoc(**_shape_doc(found.ask.shape)),
        peak_memory_mib=round(found.peak_mib), memory_percentile_mib=round(found.percentile_mib),
        target_memory_mib=int(-(-found.target_mib // 1)),
        peak_total_memory_mib=round(found.peak_total_mib) if found.peak_total_mib is not None else None,
        engine_activity_p95=round(found.activity, 4) if found.activity is not None else None,
        recommended=RecommendedDoc(**_shape_doc(found.recommended), intent=found.recommended.intent(found.target_mib)),
        change=found.change,
        saved=SavedDoc(
            gpu_equivalents_per_pod=number(found.equivalents_saved_per_pod),
            hourly_per_pod=money_text(per_pod) if per_pod is not None else None,
            gpu_equivalents=number(found.equivalents_saved_per_pod * pods_now),
            hourly=money_text(per_pod * pods_now) if per_pod is not None else None,
        ),
        confidence=found.confidence, confidence_level=found.confidence_level, notes=list(found.notes),
    )


def _stamp(moment: float) -> str:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(moment, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def recommendations_document(report: UsageReport, namespace: str | None = None,
                             workload: str | None = None) -> dict[str, Any]:
    """`/api/v1/recommendations`, `kgwe recommend -o json`: every workload's recommendation and the totals."""
    chosen = [r for r in report.recommendations
              if (namespace is None or r.workload.namespace == namespace)
              and (workload is None or r.workload.matches(workload))]
    docs = [recommendation_doc(r).model_dump(by_alias=True) for r in chosen]
    saved = sum((r.equivalents_saved_per_pod * r.pods_now for r in chosen), Decimal(0))
    money = sum((r.hourly_saved_per_pod * r.pods_now for r in chosen if r.hourly_saved_per_pod is not None),
                Decimal(0))
    waiting = [w for w in report.without_history
               if (namespace is None or w.namespace == namespace) and (workload is None or w.matches(workload))]
    return {
        "at": _stamp(report.end), "currency": report.currency, "queries": report.queries,
        "recommendations": docs,
        "withoutEnoughHistory": [w.key for w in waiting],
        "gpuEquivalentsSaved": number(saved), "hourlySaved": money_text(money),
    }


def idle_document(report: UsageReport, namespace: str | None = None) -> dict[str, Any]:
    """`/api/v1/idle`, `kgwe recommend --idle -o json`: pods whose GPUs stayed idle, with tenant and cost."""
    rows = [i for i in report.idle if namespace is None or i.namespace == namespace]
    hourly = sum((Decimal(i.hourly_cost) for i in rows if i.hourly_cost is not None), Decimal(0))
    return {
        "at": _stamp(report.end), "currency": report.currency,
        "idle": [i.model_dump(by_alias=True) for i in rows],
        "gpuEquivalents": number(sum((Decimal(str(i.gpu_equivalents)) for i in rows), Decimal(0))),
        "hourlyCost": money_text(hourly),
    }
