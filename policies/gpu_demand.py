"""What GPU resources a pod asks for, and what that is worth in GPU-equivalents (SPEC section 6).

Pure functions over pods (a PodView, or the pod's dict), shared by cost annotations, quotas and
validation. Kubernetes' rule for the effective request applies: the larger of the sum over app
containers and the largest init container.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from policies.vocabulary import resources as names
from policies.vocabulary.objects import PodView, container_amounts, pod_view
from policies.vocabulary.quantities import parse_quantity

GPU = names.NVIDIA_GPU
MIG_PREFIX = names.NVIDIA_MIG_PREFIX
GPU_PREFIXES = names.GPU_RESOURCE_PREFIXES
SEVEN = Decimal(7)
# KGWE's DRA rendering (webhook/dra) replaces a container's GPU resources by a resource claim named
# `kgwe-...` and records what they were in this output annotation, so that the pod keeps the same
# demand for quotas, costs and a second admission pass: {"container": {"nvidia.com/gpu": "2"}}.
DRA_ANNOTATION = "kgwe.io/dra-claims"
DRA_CLAIM_PREFIX = "kgwe-"
MAX_DRA_ANNOTATION = 16 * 1024


@dataclass
class GpuDemand:
    whole_gpus: int = 0  # nvidia.com/gpu (or amd.com/gpu) units, replicas on shared nodes
    mig: dict[str, int] = field(default_factory=dict)  # profile -> slices asked
    other: dict[str, Decimal] = field(default_factory=dict)  # other nvidia.com/* resources (HAMi, renamed shared)
    invalid: list[str] = field(default_factory=list)  # human-readable problems, e.g. fractional GPU counts
    gpu_containers: list[str] = field(default_factory=list)

    @property
    def asks_gpu(self) -> bool:
        return bool(self.whole_gpus or self.mig or self.other or self.invalid)


def _quantity(value: Any) -> Decimal | None:
    try:
        return parse_quantity(value)
    except ValueError:
        return None


def dra_rendered(pod: PodView | Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """container name -> the GPU resources KGWE's DRA rendering moved into a claim, for the containers
    that do carry a `kgwe-` claim (a stray or forged annotation without the claims counts nothing)."""
    return _dra_rendered(pod_view(pod))


def _dra_rendered(view: PodView) -> dict[str, dict[str, Any]]:
    raw = view.annotation(DRA_ANNOTATION)
    if not raw or len(raw) > MAX_DRA_ANNOTATION:
        return {}
    try:
        recorded = json.loads(raw)
    except ValueError:
        return {}
    if not isinstance(recorded, dict):
        return {}
    out: dict[str, dict[str, Any]] = {}
    for container in view.all_containers:
        name = str(container.raw.get("name", ""))
        kept = recorded.get(name)
        if not isinstance(kept, dict) or not isinstance(container.resources.get("claims"), list):
            continue
        if any(str(c.get("name", "")).startswith(DRA_CLAIM_PREFIX) for c in container.claims):
            out[name] = {str(k): v for k, v in kept.items() if isinstance(k, str) and k.startswith(GPU_PREFIXES)}
    return out


def _container_gpu(
    container: Mapping[str, Any], where: str, rendered: dict[str, dict[str, Any]] | None = None
) -> tuple[dict[str, Decimal], list[str]]:
    limits, requests = container_amounts(container)
    moved = rendered.get(str(container.get("name", ""))) if rendered else None
    if moved:
        limits = {**limits, **moved}
    amounts: dict[str, Decimal] = {}
    problems: list[str] = []
    # Extended resources must have requests == limits; limits alone imply requests.
    for section, values in (("limits", limits), ("requests", requests)):
        for key, raw in values.items():
            if not isinstance(key, str) or not key.startswith(GPU_PREFIXES):
                continue
            amount = _quantity(raw)
            name = container.get("name", "?")
            if amount is None:
                problems.append(f"{where} {name}: {section}[{key}] = {raw!r} is not a quantity")
                continue
            if amount < 0:
                problems.append(f"{where} {name}: {section}[{key}] = {raw!r} is negative")
                continue
            counts_devices = key == GPU or key.startswith(MIG_PREFIX) or key == names.AMD_GPU
            if counts_devices and amount != amount.to_integral_value():
                problems.append(f"{where} {name}: {section}[{key}] = {raw!r} is not a whole number of devices")
                continue
            amounts.setdefault(key, amount)
    return amounts, problems


def pod_gpu_demand(pod: PodView | Mapping[str, Any]) -> GpuDemand:
    """The pod's GPU demand (a view or the pod's dict): the effective request over its containers."""
    # The hottest reader of pods (several times per admission, once per pod of the cluster for quota
    # usage): it walks the raw container objects with the views' tolerant readers instead of making a
    # ContainerView per container, which would cost more than the rest of the walk.
    view = pod if isinstance(pod, PodView) else PodView(pod)
    demand = GpuDemand()
    app: dict[str, Decimal] = {}
    rendered = _dra_rendered(view) if view.annotation(DRA_ANNOTATION) is not None else None
    spec = view.spec
    containers = spec.get("containers")
    for container in containers if isinstance(containers, list) else ():
        if not isinstance(container, dict):
            continue
        amounts, problems = _container_gpu(container, "container", rendered)
        demand.invalid.extend(problems)
        if amounts:
            demand.gpu_containers.append(str(container.get("name", "")))
        for key, amount in amounts.items():
            app[key] = app.get(key, Decimal(0)) + amount
    init_max: dict[str, Decimal] = {}
    containers = spec.get("initContainers")
    for container in containers if isinstance(containers, list) else ():
        if not isinstance(container, dict):
            continue
        amounts, problems = _container_gpu(container, "initContainer", rendered)
        demand.invalid.extend(problems)
        for key, amount in amounts.items():
            # Sidecars (restartPolicy Always) run alongside the app containers: they add up.
            if container.get("restartPolicy") == "Always":
                app[key] = app.get(key, Decimal(0)) + amount
            else:
                init_max[key] = max(init_max.get(key, Decimal(0)), amount)
    effective = dict(app)
    for key, amount in init_max.items():
        effective[key] = max(effective.get(key, Decimal(0)), amount)
    for key, amount in effective.items():
        if amount == 0:
            continue  # asking for zero devices is asking for none
        if key in names.WHOLE_DEVICE_RESOURCES:
            demand.whole_gpus += int(amount)
        elif key.startswith(MIG_PREFIX):
            demand.mig[key[len(MIG_PREFIX):]] = int(amount)
        else:
            demand.other[key] = amount
    return demand


def mig_compute_slices(profile: str) -> int:
    """Compute slices of a MIG profile name such as `3g.40gb`, `1g.10gb+me` or `1c.3g.20gb`."""
    for part in profile.split("."):
        if part.endswith("g") and part[:-1].isdigit():
            return int(part[:-1])
    return 7


def gpu_equivalents(
    demand: GpuDemand,
    sharing: str = "exclusive",
    gpu_fraction: Decimal | None = None,
    replicas: int = 1,
) -> Decimal:
    """GPU-equivalents of a demand: whole GPU 1, MIG slice slices/7, MPS share its fraction, time-slice 1/replicas."""
    total = Decimal(0)
    for profile, count in demand.mig.items():
        total += Decimal(mig_compute_slices(profile)) / SEVEN * count
    if demand.whole_gpus:
        if sharing == "mps":
            share = gpu_fraction if gpu_fraction is not None else Decimal(1) / max(1, replicas)
            total += share * demand.whole_gpus
        elif sharing == "time-slicing":
            total += Decimal(demand.whole_gpus) / max(1, replicas)
        else:
            total += demand.whole_gpus
    return total


def container_gpu_amounts(pod: PodView | Mapping[str, Any]) -> dict[str, dict[str, Decimal]]:
    """container name (init containers too) -> the GPU resources it asks for, DRA-rendered ones included;
    containers with a problem in their amounts are left out (validation refuses those)."""
    view = pod_view(pod)
    rendered = _dra_rendered(view)
    out: dict[str, dict[str, Decimal]] = {}
    for container in view.all_containers:
        amounts, problems = _container_gpu(container.raw, "container", rendered)
        positive = {k: v for k, v in amounts.items() if v > 0}
        if positive and not problems:
            out[str(container.raw.get("name", ""))] = positive
    return out
