"""What flows through placement planning: the plan being built, and the context the steps narrow.

`build_plan` (webhook/placement/plan.py) runs an ordered tuple of named steps over one `PlanContext`.
A step is a function of the context alone: it reads the pod, its intent, the policy decision and the
cluster model, narrows `candidates` (the accelerator types still possible, in preference order) and
writes its part of `plan`. It returns False to end planning: the plan is then complete (refused, or
nothing left to decide). Steps never read the node list, only the model's per-type indexes, so their
cost does not grow with the number of nodes.

`PlacementPlan` and `Decision` live here so the step modules and `plan.py` share them without an import
cycle; `webhook.placement.plan` re-exports both, and importers keep using that path.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from policies.gpu_demand import GpuDemand
from policies.vocabulary.objects import PodView
from policies.vocabulary.quantities import GIB
from webhook.cluster.model import ClusterModel
from webhook.cluster.type_index import TypeSummary
from webhook.config import Config
from webhook.dra_rendering import DraRendering
from webhook.intent import PodIntent
from webhook.placement.constraints import Requirement
from webhook.placement.trace import TraceStep


@dataclass
class Decision:
    """The policy layer's placement decision (authoritative over the user's intent where set)."""

    fields: dict[str, Any] = field(default_factory=dict)
    decided_by: dict[str, str] = field(default_factory=dict)


@dataclass
class PlacementPlan:
    gpu_pod: bool
    types: list[str] = field(default_factory=list)  # eligible types, in preference order
    sharing: str = "exclusive"
    mig_profile: str | None = None
    mig_strategy: str | None = None
    gpu_fraction: Decimal | None = None
    gpu_memory_bytes: Decimal | None = None
    nvlink: bool = False
    gang: str | None = None
    profile: str | None = None
    requirements: list[Requirement] = field(default_factory=list)
    # Alternative requirement sets OR-ed together (several types whose nodes carry different label keys).
    type_alternatives: list[list[Requirement]] = field(default_factory=list)
    preferences: list[tuple[int, Requirement]] = field(default_factory=list)
    tolerations: list[dict[str, Any]] = field(default_factory=list)
    resource_renames: dict[str, str] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    pod_affinity_terms: list[dict[str, Any]] = field(default_factory=list)
    scheduling_gates: list[str] = field(default_factory=list)
    # The PodGroup a sized gang's member joins (native gang scheduling, webhook/gangs/native.py): rendered at
    # CREATE by /mutate only (the API server drops the field where its gate is off, so /validate never asks it).
    scheduling_group: str | None = None
    gpu_equivalents: Decimal = Decimal(0)
    price_per_gpu_hour: Decimal | None = None
    charge_type: str | None = None  # the type the pod is charged as until bound (the most expensive)
    refusals: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    decided_by: dict[str, str] = field(default_factory=dict)
    steps: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    backend: str = "device-plugin"  # device-plugin | dra (webhook/dra/backend.py)
    mig_choices: list[str] = field(default_factory=list)  # DRA: fitting MIG profiles, smallest first
    dra: DraRendering | None = None  # DRA: the claims and templates to write
    # Each narrowing step, the types it kept and why it dropped the others (webhook/placement/trace.py).
    trace: list[TraceStep] = field(default_factory=list)


@dataclass(slots=True)
class PlanContext:
    """One pod's planning state. The first group is fixed input; the rest is written by the steps in
    pipeline order (each field says which step sets it)."""

    pod: PodView  # the request's view, built at decode (never edited: planning only reads the pod)
    intent: PodIntent
    model: ClusterModel
    config: Config
    demand: GpuDemand
    plan: PlacementPlan
    # The policy decision's fields (authoritative over the intent where set).
    fields: dict[str, Any] = field(default_factory=dict)
    # profile: the named HardwareProfile's spec, None when the pod names none.
    profile_spec: Mapping[str, Any] | None = None
    # asked-types: the types asked for (intent, then profile, then the decision), in the user's order.
    requested: list[str] = field(default_factory=list)
    # asked-sharing: the sharing mode, MIG profile, MPS fraction, topology and gang asked for.
    sharing: str | None = None
    mig_profile: str | None = None
    fraction: Decimal | None = None
    topology: str | None = None
    gang: str | None = None
    # cluster-types and every filter after it: the accelerator types still possible, best first.
    candidates: list[str] = field(default_factory=list)
    # cluster-types: whether the pod (or its profile or policy) named types.
    explicit_types: bool = False
    # type-selectors: whether KGWE constrains where the pod runs, and the types it selects from
    # (before dropping those without a common label; their GPU taints are tolerated).
    narrowed: bool = False
    selected: list[TypeSummary] = field(default_factory=list)


PlanStep = Callable[[PlanContext], bool]
"""A planning step: narrows the context and writes its part of the plan; False ends planning."""


def describe_cluster(model: ClusterModel) -> str:
    """What exists, with counts: `nvidia-h100-80gb (16), nvidia-a100-80gb (12; MIG 1g.10gb x28, ...)`."""
    parts = []
    for type_id in model.type_ids():
        summary = model.types[type_id]
        mig = ", ".join(f"{p} x{o.devices}" for p, o in sorted(summary.mig.items()))
        parts.append(f"{type_id} ({summary.gpus_total}{'; MIG ' + mig if mig else ''})")
    return ", ".join(parts) if parts else "no typed GPUs"


def format_bytes(amount: Decimal) -> str:
    """An amount of memory as a user wrote it when it is whole GiB (`80Gi`), else in bytes."""
    gib = amount / GIB
    return f"{gib.normalize():f}Gi" if gib == gib.to_integral_value() else f"{int(amount)} bytes"


def decimal_or_none(value: Any) -> Decimal | None:
    """`value` as a Decimal; None when absent or not a number (profile and policy fields are untyped)."""
    try:
        return Decimal(str(value)) if value is not None else None
    except ArithmeticError:
        return None
