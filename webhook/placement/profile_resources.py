"""A HardwareProfile's resource counts and Kueue LocalQueue, as ODH/OpenShift AI hardware profiles carry them.

`spec.resources` maps a resource name (`nvidia.com/gpu`, `amd.com/gpu`, `cpu`, `memory`, any other) to
`{default, min, max}` quantities; `spec.queue` names a Kueue LocalQueue. A pod naming the profile:
- gets the `default` of each resource it sets nothing of (mutate; `apply_defaults`), on its first
  container, the one ODH's profiles size (the workbench's);
- is refused when what it asks is outside `min`..`max` (validate; the plan step `within_bounds`);
- gets the label `kueue.x-k8s.io/queue-name` when it has none.

A GPU resource counts the pod's GPU devices however KGWE rewrote them (whole GPUs plus MIG slices; DRA
renders keep their count in `kgwe.io/dra-claims`), so a pod made from a mutated template, its
`nvidia.com/gpu` turned into `nvidia.com/mig-1g.10gb`, passes unchanged (SPEC section 7). Other
resources count the pod's effective request as the scheduler does: the larger of the sum over app
containers and the largest init container, a request defaulting to its limit.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from policies.gpu_demand import GpuDemand, pod_gpu_demand
from policies.vocabulary import resources
from policies.vocabulary.objects import PodView, container_amounts, mapping, pod_view
from policies.vocabulary.quantities import parse_quantity
from webhook.placement.context import PlanContext
from webhook.placement.kueue import KUEUE_QUEUE_LABEL

GPU_RESOURCES = resources.WHOLE_DEVICE_RESOURCES
MAX_RESOURCES = 16  # the CRD's bound: a profile from the YAML directory is held to it too
MAX_QUEUE_CHARS = 63  # a label value


@dataclass(frozen=True)
class Bound:
    """One resource of a profile: each quantity as written (for messages) and as a number (None: unset)."""

    resource: str
    default: str | None = None
    min: str | None = None
    max: str | None = None

    @staticmethod
    def number(text: str | None) -> Decimal | None:
        if text is None:
            return None
        try:
            return parse_quantity(text)
        except ValueError:
            return None


@dataclass(frozen=True)
class ProfileResources:
    profile: str
    bounds: tuple[Bound, ...] = ()
    queue: str | None = None

    @property
    def empty(self) -> bool:
        return not self.bounds and self.queue is None


def _text(value: Any) -> str | None:
    # Quantities are int-or-string in the CRD; a bool is neither (True would read as 1).
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        return None
    text = str(value).strip()
    return text if text and Bound.number(text) is not None else None


def profile_resources(name: str, spec: Mapping[str, Any] | None) -> ProfileResources:
    """What profile `name`'s spec says of resources and queue; malformed entries are left out (the CRD
    refuses them in a cluster; the YAML directory is not checked on load)."""
    spec = spec or {}
    bounds = []
    for resource, raw in list(mapping(spec.get("resources")).items())[:MAX_RESOURCES]:
        entry = mapping(raw)
        bound = Bound(str(resource), _text(entry.get("default")), _text(entry.get("min")), _text(entry.get("max")))
        if bound.default or bound.min or bound.max:
            bounds.append(bound)
    queue = spec.get("queue")
    valid_queue = isinstance(queue, str) and 0 < len(queue.strip()) <= MAX_QUEUE_CHARS
    return ProfileResources(name, tuple(bounds), queue.strip() if isinstance(queue, str) and valid_queue else None)


def _effective(view: PodView, resource: str) -> Decimal:
    """The pod's effective request of `resource` (app containers summed, the largest init container)."""
    def amount(container: Mapping[str, Any]) -> Decimal:
        limits, requests = container_amounts(container)
        raw = requests.get(resource, limits.get(resource))
        return Bound.number(_text(raw)) or Decimal(0)

    app = sum((amount(c.raw) for c in view.containers), start=Decimal(0))
    init = max((amount(c.raw) for c in view.init_containers), default=Decimal(0))
    return max(app, init)


def asked(view: PodView, resource: str, demand: GpuDemand) -> Decimal:
    """What the pod asks of `resource`, as the profile's bounds count it."""
    if resource in GPU_RESOURCES:
        return Decimal(demand.whole_gpus + sum(demand.mig.values()))
    return _effective(view, resource)


def _sets_gpu(view: PodView, demand: GpuDemand) -> bool:
    # Claims of its own may be GPUs: a default beside them could double what the pod gets.
    return demand.asks_gpu or bool(view.spec.get("resourceClaims"))


def missing_defaults(pod: PodView | Mapping[str, Any], profile: ProfileResources,
                     demand: GpuDemand | None = None) -> dict[str, str]:
    """resource -> default, for the profile's resources with a default that the pod sets nothing of; `demand`,
    when given, is the pod's `pod_gpu_demand` (read once already)."""
    view = pod_view(pod)
    if not view.containers:
        return {}
    out: dict[str, str] = {}
    for bound in profile.bounds:
        if bound.default is None:
            continue
        if bound.resource in GPU_RESOURCES:
            demand = demand or pod_gpu_demand(view)
            if _sets_gpu(view, demand):
                continue
        elif any(bound.resource in section for c in view.all_containers for section in container_amounts(c.raw)):
            continue
        out[bound.resource] = bound.default
    return out


def apply_defaults(pod: dict[str, Any], profile: ProfileResources) -> None:
    """Write the missing defaults into the pod's first container. Idempotent, and a no-op once KGWE renamed
    the default GPU (MIG) or moved it into a claim (DRA): the pod then sets a GPU, so this converges in the
    mutation pipeline beside the step that renames."""
    write_defaults(pod, missing_defaults(pod, profile))


def write_defaults(pod: dict[str, Any], missing: Mapping[str, str]) -> None:
    """Write `missing` (`missing_defaults` of this pod) into the pod's first container."""
    if not missing:
        return
    container = pod["spec"]["containers"][0]
    resources_ = container.get("resources")
    if not isinstance(resources_, dict):
        resources_ = container["resources"] = {}
    for resource, value in missing.items():
        sections = ("limits", "requests") if resource in GPU_RESOURCES else ("requests",)
        for section in sections:
            # An extended resource is asked by its limit; requests, when written, must equal it.
            if section == "requests" and resource in GPU_RESOURCES and not isinstance(resources_.get(section), dict):
                continue
            amounts = resources_.get(section)
            if not isinstance(amounts, dict):
                amounts = resources_[section] = {}
            amounts[resource] = value


def queue_to_add(pod: PodView | Mapping[str, Any], profile: ProfileResources) -> str | None:
    """The profile's LocalQueue when the pod names no queue of its own (a user's queue is kept)."""
    view = pod_view(pod)
    if profile.queue is None or view.label(KUEUE_QUEUE_LABEL) is not None:
        return None
    return profile.queue


def bound_problems(pod: PodView | Mapping[str, Any], profile: ProfileResources,
                   demand: GpuDemand | None = None) -> list[str]:
    """Each resource the pod asks outside the profile's min..max, naming the bound."""
    view = pod_view(pod)
    demand = demand if demand is not None else pod_gpu_demand(view)
    problems = []
    for bound in profile.bounds:
        amount = asked(view, bound.resource, demand)
        low, high = Bound.number(bound.min), Bound.number(bound.max)
        shown = _shown(amount)
        if low is not None and amount < low:
            problems.append(f"{bound.resource} {shown} is below the minimum {bound.min} of hardware profile "
                            f"\"{profile.profile}\"")
        elif high is not None and amount > high:
            problems.append(f"{bound.resource} {shown} is above the maximum {bound.max} of hardware profile "
                            f"\"{profile.profile}\"")
    return problems


def _shown(amount: Decimal) -> str:
    """A quantity as a user writes it (`256Gi`, `500m`), not as a number of bytes or a decimal fraction."""
    if amount == amount.to_integral_value():
        whole = int(amount)
        for suffix, power in (("Ei", 60), ("Pi", 50), ("Ti", 40), ("Gi", 30), ("Mi", 20), ("Ki", 10)):
            if whole and whole % (1 << power) == 0:
                return f"{whole >> power}{suffix}"
        return str(whole)
    milli = amount * 1000
    return f"{int(milli)}m" if milli == milli.to_integral_value() else format(amount.normalize(), "f")


def within_bounds(ctx: PlanContext) -> bool:
    """Plan step: refuse a pod asking a resource outside its profile's min..max (the pod arrives here with
    the profile's defaults already written by /mutate)."""
    if ctx.profile_spec is None or ctx.intent.profile is None:
        return True
    profile = profile_resources(ctx.intent.profile, ctx.profile_spec)
    problems = bound_problems(ctx.pod, profile, ctx.demand)
    if problems:
        ctx.plan.refusals.extend(problems)
        return False
    return True
