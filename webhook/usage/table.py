"""The usage table: what admission, policies and the node view read of GPU usage, from memory (pure).

Admission must never wait on Prometheus, so the background refresher (refresher.py) reads the history
every `rightsizing.refreshInterval`, works out the report, and swaps in one immutable `UsageTable`:
per workload (its key, `Kind/namespace/name[/part]`) the peak memory, the activity percentile, whether
its pods hold idle GPUs and its recommendation; per node what its pods used in the newest window. A
request reads one dictionary entry.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from policies.vocabulary.accelerator_types import UNKNOWN, AcceleratorTable
from webhook.inventory.numbers import money_text, number
from webhook.usage.history import PodHistory, UsageHistory
from webhook.usage.views import UsageReport, recommendation_doc


class _Doc(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, frozen=True)


class AskedDoc(_Doc):
    shape: str
    accelerator_type: str
    gpus: int


class TableRecommendation(_Doc):
    """A workload's recommendation as admission and policies read it."""

    change: bool
    shape: str
    accelerator_type: str
    sharing: str  # exclusive | mig | mps
    gpus: int
    intent: dict[str, str]  # the kgwe.io/ annotations that ask for the recommended shape
    asks: AskedDoc
    gpu_equivalents_saved_per_pod: float
    hourly_saved_per_pod: str | None
    currency: str
    confidence: float
    confidence_level: str  # high | medium | low


class WorkloadUsage(_Doc):
    """One workload's usage: `input.kgwe.usage` (Rego) and `usage` (CEL) are this, as JSON (docs/policies.md)."""

    workload: str
    enough_history: bool
    peak_memory_mib: int | None = None
    engine_activity_p95: float | None = None
    idle: bool = False  # some pod of it holds GPUs that stayed idle (rightsizing.idleBelow for idleFor)
    idle_pods: int = 0
    idle_gpu_equivalents: float = 0.0
    recommendation: TableRecommendation | None = None
    at: float  # the newest window the table was read up to (Unix time)

    def policy_document(self) -> dict[str, Any]:
        return self.model_dump(by_alias=True)


class NodeUsage(_Doc):
    """What the pods on one node used in the newest window (the DCGM exporter's host label)."""

    node: str
    pods: int
    devices: int  # GPUs and MIG instances held by pods
    memory_used_mib: int
    # Engine activity as GPU-equivalents: each pod's busiest device's activity times its devices (a MIG
    # instance counts its slices/7). An upper estimate: a pod's other GPUs may be less busy.
    busy_gpu_equivalents: float
    by_type: dict[str, float] = Field(default_factory=dict)  # accelerator type -> busy GPU-equivalents


@dataclass(frozen=True)
class UsageTable:
    """One refresh: immutable, swapped whole (a reader never sees half of two refreshes)."""

    computed_at: float  # wall time of the refresh
    window_end: float  # the newest window read
    workloads: dict[str, WorkloadUsage] = field(default_factory=dict)
    nodes: dict[str, NodeUsage] = field(default_factory=dict)
    # The report the rows were made from: /api/v1/recommendations and /api/v1/idle answer from it while the
    # table is fresh, so a page and its refreshes never send Prometheus a query of their own.
    report: UsageReport | None = None

    def workload(self, key: str) -> WorkloadUsage | None:
        return self.workloads.get(key)


def build_table(report: UsageReport, history: UsageHistory, table: AcceleratorTable, computed_at: float) -> UsageTable:
    """The table of one report and the history it was worked out from."""
    end = report.end
    idle_pods: dict[str, int] = {}
    idle_equivalents: dict[str, Decimal] = {}
    for row in report.idle:
        idle_pods[row.workload] = idle_pods.get(row.workload, 0) + 1
        before = idle_equivalents.get(row.workload, Decimal(0))
        idle_equivalents[row.workload] = before + Decimal(str(row.gpu_equivalents))
    workloads: dict[str, WorkloadUsage] = {}
    for found in report.recommendations:
        doc = recommendation_doc(found)
        key = found.workload.key
        per_pod = found.hourly_saved_per_pod
        workloads[key] = WorkloadUsage(
            workload=key, enough_history=True, peak_memory_mib=doc.peak_memory_mib,
            engine_activity_p95=doc.engine_activity_p95,
            idle=key in idle_pods, idle_pods=idle_pods.get(key, 0),
            idle_gpu_equivalents=number(idle_equivalents.get(key, Decimal(0))),
            recommendation=TableRecommendation(
                change=found.change, shape=doc.recommended.shape, accelerator_type=doc.recommended.accelerator_type,
                sharing=doc.recommended.sharing, gpus=doc.recommended.gpus, intent=dict(doc.recommended.intent),
                asks=AskedDoc(shape=doc.asks.shape, accelerator_type=doc.asks.accelerator_type, gpus=doc.asks.gpus),
                gpu_equivalents_saved_per_pod=number(found.equivalents_saved_per_pod),
                hourly_saved_per_pod=money_text(per_pod) if per_pod is not None else None,
                currency=report.currency, confidence=found.confidence, confidence_level=found.confidence_level,
            ),
            at=end,
        )
    for ref in report.without_history:
        key = ref.key
        workloads[key] = WorkloadUsage(
            workload=key, enough_history=False, idle=key in idle_pods, idle_pods=idle_pods.get(key, 0),
            idle_gpu_equivalents=number(idle_equivalents.get(key, Decimal(0))), at=end,
        )
    return UsageTable(computed_at, end, workloads, node_usage(history, table), report)


def _busy(pod: PodHistory, moment: float, table: AcceleratorTable) -> tuple[float, dict[str, float]]:
    activity = pod.activity.get(moment)
    if activity is None:
        return 0.0, {}
    by_type: dict[str, float] = {}
    for (model_name, profile), count in pod.devices.models.items():
        share = 1.0
        if profile:
            head = profile.split("g.", 1)[0]
            share = int(head) / 7 if head.isdigit() and 0 < int(head) <= 7 else 1.0
        type_id = table.from_product(model_name) if model_name else UNKNOWN
        by_type[type_id] = by_type.get(type_id, 0.0) + activity * share * count
    return sum(by_type.values()), by_type


def node_usage(history: UsageHistory, table: AcceleratorTable) -> dict[str, NodeUsage]:
    """Per node, what the pods holding GPUs in the newest window used then."""
    newest = history.grid.end
    acc: dict[str, dict[str, Any]] = {}
    for pod in history.pods.values():
        host = pod.devices.host
        if not host or newest not in pod.memory:
            continue
        entry = acc.setdefault(host, {"pods": 0, "devices": 0, "memory": 0.0, "busy": 0.0, "types": {}})
        entry["pods"] += 1
        entry["devices"] += pod.devices.count
        entry["memory"] += pod.total.get(newest, pod.memory[newest])
        busy, by_type = _busy(pod, newest, table)
        entry["busy"] += busy
        for type_id, value in by_type.items():
            entry["types"][type_id] = entry["types"].get(type_id, 0.0) + value
    return {
        host: NodeUsage(
            node=host, pods=e["pods"], devices=e["devices"], memory_used_mib=round(e["memory"]),
            busy_gpu_equivalents=round(e["busy"], 3), by_type={t: round(v, 3) for t, v in sorted(e["types"].items())},
        )
        for host, e in sorted(acc.items())
    }
