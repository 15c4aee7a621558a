"""From a pod's intent (and the policies' decision) to a placement plan, against the cluster model.

A pure function: the pod, its intent, the policy decision and the model in, a `PlacementPlan` out
(requirements, preferences, tolerations, resource renames, env, labels, cost, refusals). It reads only
the per-type indexes of the model, so its cost does not grow with the number of nodes. The mutation
steps render the plan; `/validate` refuses the plan's refusals. The plan is computed from whatever pod
arrives, and a pod that already carries an earlier pass's output yields the same plan (idempotence).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from policies.gpu_demand import GpuDemand, gpu_equivalents, mig_compute_slices, pod_gpu_demand
from policies.vocabulary import resources
from policies.vocabulary.accelerator_types import UNKNOWN, MigProfile
from policies.vocabulary.quantities import GIB, MIB
from policies.vocabulary.topology_schema import LABEL_NVLINK_CLIQUE, LABEL_NVLINK_DOMAIN_SIZE
from webhook.cluster.model import ClusterModel, TypeSummary
from webhook.cluster.node_facts import L_CLIQUE, L_GKE_PARTITION, L_GKE_SHARING, L_MIG_STATE, L_PRODUCT, L_SHARING
from webhook.config import Config
from webhook.dra.render import DraRendering
from webhook.gangs.placement import plan_sized_gang
from webhook.intent import PodIntent
from webhook.placement.constraints import Requirement, merge
from webhook.placement.dra import choose_backend, plan_dra_mig, render_dra
from webhook.placement.suggest import with_hints
from webhook.placement.trace import TraceStep, record, refusal_or
from webhook.placement.vendors import restrict_to_vendor

GPU = resources.NVIDIA_GPU
HAMI_RESOURCES = resources.HAMI_RESOURCES
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
KUEUE_REQUIRED_TOPOLOGY = "kueue.x-k8s.io/podset-required-topology"


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


def _memory_gib(type_id: str, model: ClusterModel) -> int | None:
    return model.table.memory_gb(type_id)


def describe_cluster(model: ClusterModel) -> str:
    """What exists, with counts: `nvidia-h100-80gb (16), nvidia-a100-80gb (12; MIG 1g.10gb x28, ...)`."""
    parts = []
    for type_id in model.type_ids():
        summary = model.types[type_id]
        mig = ", ".join(f"{p} x{o.devices}" for p, o in sorted(summary.mig.items()))
        parts.append(f"{type_id} ({summary.gpus_total}{'; MIG ' + mig if mig else ''})")
    return ", ".join(parts) if parts else "no typed GPUs"


def _profile_spec(model: ClusterModel, name: str) -> dict[str, Any] | None:
    obj = model.hardware_profiles.get(name)
    if obj is None:
        return None
    spec = obj.get("spec") or {}
    return spec if isinstance(spec, dict) else {}


def _decimal(value: Any) -> Decimal | None:
    try:
        return Decimal(str(value)) if value is not None else None
    except ArithmeticError:
        return None


def _selector_requirements(summaries: list[TypeSummary]) -> tuple[list[list[Requirement]], list[str]]:
    """Requirements selecting exactly the given types' nodes, as OR-ed alternatives (one per label key)."""
    by_key: dict[str, list[str]] = {}
    unselectable = []
    for summary in summaries:
        selector = summary.selector()
        if selector is None:
            unselectable.append(summary.type_id)
            continue
        key, values = selector
        by_key.setdefault(key, [])
        by_key[key].extend(v for v in values if v not in by_key[key])
    alternatives = [[Requirement(key, "In", tuple(values))] for key, values in by_key.items()]
    return alternatives, unselectable


def _preference_weights(count: int) -> list[int]:
    return [max(1, round(100 * (count - i) / count)) for i in range(count)]


def _price(type_id: str, profile_spec: dict[str, Any] | None, config: Config) -> Decimal | None:
    if profile_spec is not None and profile_spec.get("pricePerGPUHour") is not None:
        return _decimal(profile_spec.get("pricePerGPUHour"))
    return config.price_per_gpu_hour(type_id)


def _smallest_fitting(
    offers: list[tuple[str, str, MigProfile | None]], memory_bytes: Decimal | None
) -> tuple[str, str] | None:
    """(type, profile) of the smallest MIG profile (memory, then compute) that fits the memory asked."""
    best: tuple[tuple[int, int], str, str] | None = None
    for type_id, profile, info in offers:
        memory_gb = info.memory_gb if info else _profile_gb(profile)
        if memory_gb is None:
            continue
        if memory_bytes is not None and Decimal(memory_gb) * GIB < memory_bytes:
            continue
        compute = info.compute_slices if info else mig_compute_slices(profile)
        rank = (memory_gb, compute)
        if best is None or rank < best[0]:
            best = (rank, type_id, profile)
    return (best[1], best[2]) if best else None


def _profile_gb(profile: str) -> int | None:
    try:
        return int(profile.split("+")[0].split(".")[-1].removesuffix("gb"))
    except ValueError:
        return None


def build_plan(
    pod: dict[str, Any],
    intent: PodIntent,
    decision: Decision | None,
    model: ClusterModel,
    config: Config,
    demand: GpuDemand | None = None,
) -> PlacementPlan:
    """`demand` is the pod's GPU demand when the caller has it already (it is derived from `pod`)."""
    demand = demand if demand is not None else pod_gpu_demand(pod)
    plan = PlacementPlan(gpu_pod=demand.asks_gpu or not intent.empty)
    if not plan.gpu_pod:
        return plan
    fields = dict(decision.fields) if decision else {}
    decided_by = dict(decision.decided_by) if decision else {}
    plan.decided_by = {k: v for k, v in decided_by.items() if k in fields}

    # Profile: a named HardwareProfile brings types, sharing, extra selectors, tolerations and a price.
    profile_spec: dict[str, Any] | None = None
    if intent.profile:
        plan.profile = intent.profile
        profile_spec = _profile_spec(model, intent.profile)
        if profile_spec is None:
            known = ", ".join(sorted(model.hardware_profiles)) or "none"
            plan.refusals.append(f"hardware profile {intent.profile!r} does not exist; profiles: {known}")
            return plan

    requested: list[str] = list(intent.accelerator_types)

    if profile_spec is not None:
        profile_types = [str(t) for t in profile_spec.get("acceleratorTypes") or []]
        if requested and profile_types:
            outside = [t for t in requested if t not in profile_types]
            if outside:
                plan.refusals.append(
                    f"kgwe.io/accelerator {', '.join(outside)} is not in hardware profile {intent.profile!r} "
                    f"({', '.join(profile_types)})"
                )
                return plan
        elif profile_types:
            requested = profile_types
    if fields.get("acceleratorTypes"):
        requested = [str(t) for t in fields["acceleratorTypes"]]

    sharing_spec = (profile_spec or {}).get("sharing") or {}
    sharing = intent.sharing or (str(sharing_spec.get("mode")) if sharing_spec.get("mode") else None)
    mig_profile: str | None = str(sharing_spec["migProfile"]) if sharing_spec.get("migProfile") else None
    fraction = intent.gpu_fraction if intent.gpu_fraction is not None else _decimal(sharing_spec.get("gpuFraction"))
    topology = intent.topology
    gang = intent.gang
    decided_sharing = fields.get("sharing") or {}
    if isinstance(decided_sharing, dict) and decided_sharing.get("mode"):
        sharing = str(decided_sharing["mode"])
        mig_profile = str(decided_sharing["migProfile"]) if decided_sharing.get("migProfile") else mig_profile
        fraction = _decimal(decided_sharing.get("gpuFraction")) or fraction
    if fields.get("topology"):
        topology = str(fields["topology"])
    if fields.get("gang"):
        gang = str(fields["gang"])
    # A pod that already asks for a MIG resource (a user who named it, or an earlier pass) is a MIG pod.
    if demand.mig and sharing in (None, "mig"):
        sharing = "mig"
        mig_profile = mig_profile or sorted(demand.mig)[0]
    if sharing is None and fraction is not None:
        sharing = "mps"
    plan.gpu_memory_bytes = intent.gpu_memory_bytes
    plan.gang = gang

    hami = any(key in demand.other for key in HAMI_RESOURCES)
    if hami and sharing in ("mig", "mps"):
        plan.warnings.append("HAMi resources present: KGWE leaves GPU sharing to HAMi and selects nodes only")
        sharing = None

    # Candidate types, in the user's order, or every typed type of the cluster.
    present = model.type_ids()
    if requested:
        missing = [t for t in requested if t not in model.types or t == UNKNOWN]
        candidates = [t for t in requested if t in model.types and t != UNKNOWN]
        plan.trace.append(TraceStep("requested", tuple(candidates), tuple((t, "no such GPUs in this cluster")
                                                                            for t in missing[:16])))
        if not candidates:
            named = with_hints(missing, present, model.table)
            plan.refusals.append(f"{named}: no such GPUs; this cluster has {describe_cluster(model)}")
            return plan
        if missing:
            named = with_hints(missing, present, model.table)
            plan.warnings.append(f"{named}: not in this cluster; using {', '.join(candidates)}")
        plan.steps.append("accelerator")
    else:
        candidates = list(present)
        record(plan, "every GPU type", candidates, note="no type asked for: every typed GPU type of the cluster")
    explicit_types = bool(requested)
    candidates, vendor_refusal = restrict_to_vendor(pod, candidates, model.table, explicit_types)
    record(plan, "vendor", candidates, refusal_or(plan, "the pod's GPU resource is another vendor's"))
    if vendor_refusal:
        plan.refusals.append(vendor_refusal)
        return plan
    if explicit_types or not intent.empty or fields:
        candidates = choose_backend(plan, candidates, model, config)
        record(plan, "backend", candidates, "published another way (device plugin or DRA) than the preferred type")

    # GPU memory per GPU (or per slice for MIG): whole-GPU types must have at least that much.
    if intent.gpu_memory_bytes is not None and sharing != "mig":
        fitting = [t for t in candidates if (_memory_gib(t, model) or 0) * GIB >= intent.gpu_memory_bytes]
        record(plan, "gpu-memory", fitting, lambda t: f"{_memory_gib(t, model) or 0} GiB per GPU, less than asked")
        if not fitting:
            asked = _format_bytes(intent.gpu_memory_bytes)
            plan.refusals.append(
                f"no GPU type with at least {asked} per GPU among {', '.join(candidates) or 'none'}; "
                f"this cluster has {describe_cluster(model)}"
            )
            return plan
        candidates = fitting
        plan.steps.append("gpu-memory")

    whole_gpus = demand.whole_gpus
    max_container_gpus = _max_container_gpus(pod)

    # Sharing.
    if sharing == "mig":
        planner = plan_dra_mig if plan.backend == "dra" else _plan_mig
        if not planner(plan, pod, demand, candidates, mig_profile, intent, model):
            record(plan, "mig", [], refusal_or(plan, "no MIG slice fits"))
            return plan
        record(plan, "mig", plan.types, f"no node offers MIG {plan.mig_profile} ({plan.mig_strategy} strategy)")
        candidates = plan.types
    elif sharing == "mps":
        mps_types = [t for t in candidates if model.types[t].mps_nodes]
        record(plan, "mps", mps_types, "no node of this type is shared with MPS")
        if not mps_types:
            plan.refusals.append(
                f"MPS sharing: no {'/'.join(candidates) if explicit_types else 'GPU'} node is shared with MPS; "
                f"this cluster has {describe_cluster(model)}"
            )
            return plan
        if max_container_gpus > 1:
            plan.refusals.append(
                f"MPS sharing gives each container one share of one GPU; a container asks for {max_container_gpus} "
                "nvidia.com/gpu (ask for 1, and set kgwe.io/gpu-fraction)"
            )
            return plan
        candidates = mps_types
        plan.sharing = "mps"
        plan.gpu_fraction = fraction
        if fraction is not None:
            plan.env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] = str(max(1, min(100, math.floor(fraction * 100))))
        if intent.gpu_memory_bytes is not None:
            mib = int((intent.gpu_memory_bytes / MIB).to_integral_value(rounding="ROUND_CEILING"))
            plan.env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] = f"0={mib}M"
        plan.requirements.append(_sharing_requirement(model, [n for t in mps_types for n in model.types[t].mps_nodes]))
        plan.steps.append("mps")
    elif sharing == "time-slicing":
        ts_types = [t for t in candidates if model.types[t].timeslice_nodes]
        record(plan, "time-slicing", ts_types, "no node of this type is time-sliced")
        if not ts_types:
            plan.refusals.append(
                f"time-slicing: no {'/'.join(candidates) if explicit_types else 'GPU'} node is time-sliced; "
                f"this cluster has {describe_cluster(model)}"
            )
            return plan
        candidates = ts_types
        plan.sharing = "time-slicing"
        plan.requirements.append(Requirement(L_SHARING, "In", ("time-slicing",)))
        plan.steps.append("time-slicing")
    elif sharing == "exclusive":
        excl = [t for t in candidates if model.types[t].exclusive_nodes]
        record(plan, "exclusive", excl, "every node of this type is shared or MIG-partitioned")
        if not excl:
            plan.refusals.append(f"exclusive GPUs: every {'/'.join(candidates)} node is shared or MIG-partitioned")
            return plan
        candidates = excl
        plan.requirements.append(Requirement(L_SHARING, "NotIn", ("mps", "time-slicing")))
        plan.steps.append("exclusive")

    # Whole GPUs per pod: a pod runs on one node, so no node may have fewer physical GPUs than asked.
    if whole_gpus and plan.sharing not in ("mig",):
        capacity = {t: _gpu_capacity(model.types[t], plan.sharing) for t in candidates}
        fitting = [t for t in candidates if capacity[t] >= whole_gpus]
        record(plan, "gpus per node", fitting, lambda t: f"at most {capacity[t]} GPUs on one node, the pod asks for "
               f"{whole_gpus}")
        if not fitting:
            most = max(candidates, key=lambda t: capacity[t]) if candidates else None
            detail = f"the most any {'/'.join(candidates)} node has is {capacity[most]}" if most else "no GPU node"
            plan.refusals.append(f"this pod asks for {whole_gpus} GPUs on one node; {detail}")
            return plan
        candidates = fitting

    # NVLink: every GPU of the pod in one NVLink domain.
    if topology == "nvlink":
        if plan.sharing == "mig":
            plan.warnings.append("kgwe.io/topology nvlink ignored: MIG slices cannot use NVLink")
        elif whole_gpus > 1:
            if not _plan_nvlink(plan, candidates, whole_gpus, model):
                record(plan, "nvlink", [], lambda t: f"largest NVLink domain has {model.types[t].max_nvlink_domain} "
                       f"GPUs, the pod asks for {whole_gpus}")
                return plan
            record(plan, "nvlink", plan.types, lambda t: f"no node of this type has a {whole_gpus}-GPU NVLink domain "
                   f"(largest {model.types[t].max_nvlink_domain})")
            candidates = plan.types
        else:
            plan.notes.append("nvlink: one GPU or fewer, nothing to keep together")

    # Gang: co-locate the job's pods in one NVLink clique.
    if gang:
        if intent.gang_size is not None:
            if not plan_sized_gang(plan, pod, candidates, gang, intent.gang_size, whole_gpus, model):
                record(plan, "gang", [], refusal_or(plan, "no NVLink clique has room for the gang"))
                return plan
        elif not _plan_gang(plan, pod, candidates, gang, model):
            record(plan, "gang", [], refusal_or(plan, "no node of this type is in a multi-node NVLink clique"))
            return plan
        candidates = plan.types
        record(plan, "gang", candidates, "no node of this type is in an NVLink clique with room for the gang")

    plan.types = candidates
    # A pod with any KGWE intent runs on typed GPU nodes only, with their GPU taints tolerated.
    narrowed = explicit_types or bool(plan.steps) or not intent.empty
    if narrowed and candidates:
        summaries = [model.types[t] for t in candidates]
        # DRA: the claim's CEL selectors pick the type (and its order); no node label is needed.
        dra = plan.backend == "dra"
        alternatives, unselectable = _selector_requirements(summaries) if not dra else ([], [])
        if unselectable:
            plan.warnings.append(f"{', '.join(unselectable)}: nodes carry no common type label; not selected")
            candidates = [t for t in candidates if t not in unselectable]
            plan.types = candidates
            record(plan, "selectable", candidates, "its nodes carry no common type label to select them by")
        if not alternatives and not dra:
            plan.refusals.append(f"{', '.join(unselectable)}: its nodes cannot be selected by label")
            return plan
        if len(alternatives) == 1:
            plan.requirements[:0] = alternatives[0]
        else:
            plan.type_alternatives = alternatives
        if len(candidates) > 1 and explicit_types and not dra:
            for weight, type_id in zip(_preference_weights(len(candidates)), candidates, strict=True):
                selector = model.types[type_id].selector()
                if selector:
                    plan.preferences.append((weight, Requirement(selector[0], "In", tuple(selector[1]))))
        plan.tolerations = _tolerations(summaries, profile_spec)
        if profile_spec and profile_spec.get("nodeSelector"):
            for key, value in profile_spec["nodeSelector"].items():
                plan.requirements.append(Requirement(str(key), "In", (str(value),)))
        if "accelerator" not in plan.steps:
            plan.steps.insert(0, "accelerator")
    merged, problems = merge(plan.requirements)
    plan.requirements = merged
    if problems:
        plan.refusals.extend(problems)
        return plan
    if plan.backend == "dra" and narrowed and not render_dra(plan, pod, model, config):
        return plan

    # Cost: GPU-equivalents times the price of the most expensive type it may land on.
    equivalents = gpu_equivalents(
        demand if plan.sharing != "mig" else _mig_demand(demand, plan),
        plan.sharing,
        plan.gpu_fraction,
        _replicas(model, candidates, plan.sharing),
    )
    plan.gpu_equivalents = equivalents
    prices = [(type_id, _price(type_id, profile_spec, config)) for type_id in candidates]
    priced = [(type_id, price) for type_id, price in prices if price is not None]
    if priced:
        plan.charge_type, plan.price_per_gpu_hour = max(priced, key=lambda item: item[1])
    elif candidates:
        plan.charge_type = candidates[0]
    if demand.asks_gpu:
        plan.steps.append("cost")
    return plan


def _format_bytes(amount: Decimal) -> str:
    gib = amount / GIB
    return f"{gib.normalize():f}Gi" if gib == gib.to_integral_value() else f"{int(amount)} bytes"


def _max_container_gpus(pod: dict[str, Any]) -> int:
    most = 0
    for container in (pod.get("spec") or {}).get("containers") or []:
        demand = pod_gpu_demand({"spec": {"containers": [container]}})
        most = max(most, demand.whole_gpus)
    return most


# Labels that mark an MPS-shared node, best first: GFD's sharing strategy, the device plugin's MPS
# daemon selector, GKE's sharing strategy.
MPS_MARKERS = ((L_SHARING, "mps"), ("nvidia.com/mps.capable", "true"), (L_GKE_SHARING, "mps"))


def _sharing_requirement(model: ClusterModel, nodes: list[str]) -> Requirement:
    """A requirement on a label every MPS node carries (checked on a bounded sample per request)."""
    sample = [model.nodes[n].labels for n in nodes[:64]]
    for key, value in MPS_MARKERS:
        if all(labels.get(key, "").lower() == value for labels in sample):
            return Requirement(key, "In", (value,))
    return Requirement(L_SHARING, "In", ("mps",))


def _gpu_capacity(summary: TypeSummary, sharing: str) -> int:
    if sharing in ("mps", "time-slicing"):
        return summary.max_gpus_per_node
    return max(summary.max_gpus_exclusive_node, 0) if summary.exclusive_nodes else summary.max_gpus_per_node


def _replicas(model: ClusterModel, types: list[str], sharing: str) -> int:
    if sharing not in ("mps", "time-slicing"):
        return 1
    for type_id in types:
        nodes = model.types[type_id].mps_nodes if sharing == "mps" else model.types[type_id].timeslice_nodes
        if nodes:
            return model.nodes[nodes[0]].replicas
    return 1


def _mig_demand(demand: GpuDemand, plan: PlacementPlan) -> GpuDemand:
    """The pod's demand once its whole GPUs are MIG slices of the chosen profile."""
    mig = dict(demand.mig)
    if plan.mig_profile and demand.whole_gpus:
        mig[plan.mig_profile] = mig.get(plan.mig_profile, 0) + demand.whole_gpus
    return GpuDemand(whole_gpus=0, mig=mig)


def _plan_mig(
    plan: PlacementPlan,
    pod: dict[str, Any],
    demand: GpuDemand,
    candidates: list[str],
    wanted_profile: str | None,
    intent: PodIntent,
    model: ClusterModel,
) -> bool:
    offers: list[tuple[str, str, MigProfile | None, str]] = []
    for type_id in candidates:
        accel = model.table.get(type_id)
        for profile, offer in model.types[type_id].mig.items():
            for strategy in offer.strategies:
                offers.append((type_id, profile, accel.mig_profile(profile) if accel else None, strategy))
    if not offers:
        scope = "/".join(candidates) if candidates else "GPU"
        plan.refusals.append(f"MIG: no {scope} node offers MIG slices; this cluster has {describe_cluster(model)}")
        return False
    if wanted_profile:
        if not any(o[1] == wanted_profile for o in offers):
            plan.refusals.append(
                f"MIG profile {wanted_profile}: no node offers it; this cluster has {describe_cluster(model)}"
            )
            return False
        if intent.gpu_memory_bytes is not None and (_profile_gb(wanted_profile) or 0) * GIB < intent.gpu_memory_bytes:
            plan.refusals.append(
                f"MIG profile {wanted_profile} has less than the {_format_bytes(intent.gpu_memory_bytes)} asked "
                "by kgwe.io/gpu-memory"
            )
            return False
        profile = wanted_profile
    else:
        # The smallest fitting slice anywhere (SPEC), whatever the strategy of the nodes offering it.
        best = _smallest_fitting([(t, p, i) for t, p, i, _s in offers], intent.gpu_memory_bytes)
        if best is None:
            asked = _format_bytes(intent.gpu_memory_bytes) if intent.gpu_memory_bytes else "the memory asked"
            plan.refusals.append(f"MIG: no slice has {asked}; this cluster has {describe_cluster(model)}")
            return False
        profile = best[1]
    # One strategy for the pod: mixed (named resources) before single (product label) before GKE.
    strategy = next(s for s in ("mixed", "single", "gke") if any(o[1] == profile and o[3] == s for o in offers))
    types = [t for t in candidates if any(o[0] == t and o[1] == profile and o[3] == strategy for o in offers)]
    # Slices per pod: the count of whole GPUs asked becomes the count of slices.
    slices = demand.whole_gpus + demand.mig.get(profile, 0)
    most = max(
        (model.nodes[n].mig_profiles.get(profile, 0) for t in types for n in model.types[t].mig[profile].nodes[:50]),
        default=0,
    )
    if slices > most:
        plan.refusals.append(
            f"this pod asks for {slices} MIG {profile} slices on one node; the most any node has is {most}"
        )
        return False
    other_mig = [p for p in demand.mig if p != profile]
    if other_mig:
        plan.refusals.append(f"the pod asks for MIG {', '.join(other_mig)} and MIG {profile}: one profile per pod")
        return False
    plan.types = types
    plan.sharing = "mig"
    plan.mig_profile = profile
    plan.mig_strategy = strategy
    if strategy == "mixed":
        plan.resource_renames = {GPU: f"nvidia.com/mig-{profile}"}
    elif strategy == "single":
        products = sorted({p for t in types for p in model.types[t].mig[profile].products})
        plan.requirements.append(Requirement(L_PRODUCT, "In", tuple(products)))
    else:
        plan.requirements.append(Requirement(L_GKE_PARTITION, "In", (profile,)))
    plan.requirements.append(Requirement(L_MIG_STATE, "NotIn", ("pending", "rebooting", "failed")))
    plan.steps.append("mig")
    return True


def _plan_nvlink(plan: PlacementPlan, candidates: list[str], gpus: int, model: ClusterModel) -> bool:
    qualifying = [t for t in candidates if model.types[t].max_nvlink_domain >= gpus]
    if not qualifying:
        best = max((model.types[t].max_nvlink_domain for t in candidates), default=0)
        plan.refusals.append(
            f"kgwe.io/topology nvlink: this pod asks for {gpus} GPUs in one NVLink domain; the largest "
            f"{'/'.join(candidates) or 'GPU'} NVLink domain has {best}"
        )
        return False
    labelled = all(
        all(LABEL_NVLINK_DOMAIN_SIZE in model.nodes[n].labels for n in model.types[t].nodes[:20]) for t in qualifying
    )
    whole = [t for t in qualifying if min(model.types[t].nvlink_domains) >= gpus]
    if labelled:
        plan.requirements.append(Requirement(LABEL_NVLINK_DOMAIN_SIZE, "Gt", (str(gpus - 1),)))
    elif whole:
        qualifying = whole  # every node of these types qualifies: the type selector is enough
    else:
        plan.refusals.append(
            f"kgwe.io/topology nvlink: nodes with {gpus}-GPU NVLink domains carry no {LABEL_NVLINK_DOMAIN_SIZE} "
            "label (is the KGWE agent running?)"
        )
        return False
    plan.types = qualifying
    plan.nvlink = True
    plan.steps.append("nvlink")
    return True


def _plan_gang(plan: PlacementPlan, pod: dict[str, Any], candidates: list[str], gang: str, model: ClusterModel) -> bool:
    with_cliques = [t for t in candidates if model.types[t].cliques]
    if not with_cliques:
        plan.refusals.append(
            f"kgwe.io/gang {gang}: gangs are kept in one multi-node NVLink clique, and no "
            f"{'/'.join(candidates) or 'GPU'} node is in one; this cluster has {describe_cluster(model)}"
        )
        return False
    label_keys = set().union(*(model.types[t].clique_labels for t in with_cliques))
    clique_key = LABEL_NVLINK_CLIQUE if LABEL_NVLINK_CLIQUE in label_keys else L_CLIQUE
    plan.types = with_cliques
    plan.labels["kgwe.io/gang"] = gang
    plan.requirements.append(Requirement(clique_key, "Exists"))
    plan.pod_affinity_terms.append(
        {"labelSelector": {"matchLabels": {"kgwe.io/gang": gang}}, "topologyKey": clique_key}
    )
    labels = (pod.get("metadata") or {}).get("labels") or {}
    if KUEUE_QUEUE_LABEL in labels or KUEUE_QUEUE_LABEL in ((pod.get("metadata") or {}).get("annotations") or {}):
        plan.annotations[KUEUE_REQUIRED_TOPOLOGY] = clique_key
    plan.steps.append("gang")
    return True


def _tolerations(summaries: list[TypeSummary], profile_spec: dict[str, Any] | None) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    taints = sorted({t for s in summaries for t in s.gpu_taints}, key=lambda t: (t.key, t.value or "", t.effect))
    for taint in taints:
        toleration: dict[str, Any] = {"key": taint.key, "operator": "Exists", "effect": taint.effect}
        if toleration not in out:
            out.append(toleration)
    for toleration in (profile_spec or {}).get("tolerations") or []:
        if isinstance(toleration, dict) and toleration not in out:
            out.append(dict(toleration))
    return out
