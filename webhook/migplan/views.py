"""The MIG plan of a cluster: every `MIGStrategy`, the nodes it selects and each node's plan, as one
document (`kgwe mig-plan`, `GET /api/v1/mig-plan`, the status of each strategy).

Reads the cluster model and, where one is at hand, the usage report; everything else is the pure planner.
Nodes are planned in name order, strategies in name order, from one pool of wants: a pod one node's plan
serves is not served again by the next.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from policies.gpu_demand import pod_gpu_demand
from policies.vocabulary import keys
from policies.vocabulary.mig_geometry import MIG_RULES
from policies.vocabulary.objects import PodView
from webhook.cluster.model import ClusterModel
from webhook.cluster.node_facts import NodeFacts
from webhook.migplan.demand import Want, pending_wants, recommended_wants
from webhook.migplan.layouts import describe
from webhook.migplan.mig_config import config_entries, config_name, mig_parted_document
from webhook.migplan.planner import NodeInput, NodePlan, Wanted, plan_node
from webhook.migplan.strategy import MigStrategy, read_strategy

MIG_CAPABLE_LABEL = "nvidia.com/mig.capable"
MIG_CONFIG_LABEL = "nvidia.com/mig.config"
DRA_NOTE = ("its MIG slices are DRA devices: NVIDIA's DRA driver (DynamicMIG feature gate) creates and "
            "destroys slices per ResourceClaim at allocation, so no layout is planned for it")


class _Doc(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True)


class ServedDoc(_Doc):
    source: str  # pending | recommended
    who: str
    profile: str
    slices: int


class GpuLayoutDoc(_Doc):
    devices: list[int]
    layout: str
    mig_devices: dict[str, int]


class NodePlanDoc(_Doc):
    node: str
    accelerator_type: str
    gpus: int
    action: str  # change | keep | skip
    reason: str
    current: dict[str, int]
    current_config: str | None = None
    planned: dict[str, int] = Field(default_factory=dict)
    config: str | None = None  # the mig-parted config the plan names (action change)
    layouts: list[GpuLayoutDoc] = Field(default_factory=list)
    serves: list[ServedDoc] = Field(default_factory=list)
    fill: float = 0.0
    resource_version: str = ""  # the node object's, for a patch that must not act on a newer node


class StrategyPlanDoc(_Doc):
    name: str
    mode: str
    rebalance_interval: str = ""
    min_utilization: float = 0.0
    problem: str | None = None
    nodes: list[NodePlanDoc] = Field(default_factory=list)


class WantDoc(_Doc):
    source: str
    who: str
    options: list[str]
    slices: int


class MigPlanDoc(_Doc):
    strategies: list[StrategyPlanDoc] = Field(default_factory=list)
    unserved: list[WantDoc] = Field(default_factory=list)
    usage: str = ""  # whether recommendations were read, and if not why
    mig_config: dict[str, Any] = Field(default_factory=dict)  # the mig-parted file of every planned config

    def document(self) -> dict[str, Any]:
        return self.model_dump(by_alias=True)


def running_pods_by_node(model: ClusterModel) -> dict[str, list[str]]:
    """Per node, the pods bound to it that hold GPUs (devices or DRA claims) and have not finished."""
    out: dict[str, list[str]] = {}
    for raw in model.pods.values():
        pod = PodView(raw)
        if not pod.node_name or pod.terminal:
            continue
        if pod_gpu_demand(pod).asks_gpu or pod.resource_claims:
            out.setdefault(pod.node_name, []).append(f"{pod.namespace}/{pod.name}")
    return {node: sorted(pods) for node, pods in out.items()}


def _skip(facts: NodeFacts, reason: str, rv: str) -> NodePlanDoc:
    return NodePlanDoc(node=facts.name, accelerator_type=facts.accelerator_type, gpus=facts.gpu_count, action="skip",
                       reason=reason, current=dict(facts.mig_profiles),
                       current_config=facts.labels.get(MIG_CONFIG_LABEL), resource_version=rv)


def _mig_capable(facts: NodeFacts) -> bool:
    return facts.labels.get(MIG_CAPABLE_LABEL) == "true" or facts.mig_strategy in ("mixed", "single")


def _node_doc(facts: NodeFacts, plan: NodePlan, wants: list[Want], rv: str) -> NodePlanDoc:
    doc = NodePlanDoc(
        node=plan.node, accelerator_type=plan.type_id, gpus=plan.gpus, action=plan.action, reason=plan.reason,
        current=plan.current, current_config=facts.labels.get(MIG_CONFIG_LABEL), planned=plan.planned,
        serves=[ServedDoc(source=s, who=w, profile=p, slices=n) for s, w, p, n in plan.serves], fill=plan.fill,
        resource_version=rv,
    )
    if plan.action == "change":
        entries = config_entries(plan.layouts)
        doc.config = config_name(plan.type_id, entries)
        groups: dict[tuple[tuple[str, int], ...], list[int]] = {}
        for index, layout in enumerate(plan.layouts):
            groups.setdefault(layout, []).append(index)
        doc.layouts = [GpuLayoutDoc(devices=d, layout=describe(layout), mig_devices=dict(layout))
                       for layout, d in sorted(groups.items(), key=lambda item: item[1])]
    return doc


def plan_cluster(model: ClusterModel, strategies: Iterable[dict[str, Any]] | None = None,
                 recommendations: Iterable[Any] | None = None, usage_note: str = "") -> MigPlanDoc:
    """The plan of every MIGStrategy of `model` (or of `strategies`, raw objects), serving the pods waiting in
    `model` and, when given, the usage report's recommendations."""
    raw = list(strategies) if strategies is not None else list(model.mig_strategies.values())
    wants = pending_wants(model.pods.values(), model.table) + recommended_wants(recommendations or ())
    wanted = Wanted(wants)
    running = running_pods_by_node(model)
    claimed: set[str] = set()
    out = MigPlanDoc(usage=usage_note)
    configs: dict[str, list[dict[str, Any]]] = {}
    for obj in sorted(raw, key=lambda o: str((o.get("metadata") or {}).get("name"))):
        strategy = read_strategy(obj)
        if not isinstance(strategy, MigStrategy):
            out.strategies.append(StrategyPlanDoc(name=str((obj.get("metadata") or {}).get("name")), mode="",
                                                  problem=strategy))
            continue
        spec = strategy.spec
        doc = StrategyPlanDoc(name=strategy.name, mode=spec.mode, rebalance_interval=spec.rebalance_interval,
                              min_utilization=spec.min_utilization)
        selector = spec.selector()
        preferred = [(p.profile, p.share) for p in spec.preferred_profiles]
        for name in sorted(model.nodes):
            facts = model.nodes[name]
            if selector is not None and not selector.matches(facts.labels):
                continue
            if not _mig_capable(facts) or facts.accelerator_type not in MIG_RULES or facts.gpu_count <= 0:
                continue
            rv = str((model.node_objects.get(name, {}).get("metadata") or {}).get("resourceVersion") or "")
            if name in claimed:
                doc.nodes.append(_skip(facts, "an earlier MIGStrategy (by name) selects it too", rv))
                continue
            claimed.add(name)
            if facts.dra is not None and (facts.dra.gpus or facts.dra.mig):
                doc.nodes.append(_skip(facts, DRA_NOTE, rv))
                continue
            if facts.mig_strategy == "gke":
                doc.nodes.append(_skip(facts, "GKE partitions GPUs per node pool (gpu-partition-size)", rv))
                continue
            node = NodeInput(
                name=name, type_id=facts.accelerator_type, gpus=facts.gpu_count,
                strategy="single" if facts.mig_strategy == "single" else "mixed", current=dict(facts.mig_profiles),
                config_label=facts.labels.get(MIG_CONFIG_LABEL), config_state=facts.labels.get(
                    keys.NVIDIA_MIG_CONFIG_STATE), running_pods=tuple(running.get(name, ())),
            )
            plan = plan_node(node, wanted, preferred, spec.min_utilization)
            node_doc = _node_doc(facts, plan, wants, rv)
            if node_doc.config:
                configs[node_doc.config] = config_entries(plan.layouts)
            doc.nodes.append(node_doc)
        out.strategies.append(doc)
    out.unserved = [WantDoc(source=w.source, who=w.who, options=[f"{t} {p}" for t, p in w.options], slices=left)
                    for w, left in zip(wants, wanted.left, strict=True) if left > 0]
    out.mig_config = mig_parted_document(configs)
    return out
