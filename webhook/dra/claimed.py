"""GPUs a pod asks for through ResourceClaims it names itself, not through KGWE's intent.

A pod creator can skip `nvidia.com/gpu` and name a ResourceClaimTemplate or ResourceClaim of their own
that asks the DRA driver for GPUs (`deviceClassName: gpu.nvidia.com`). Left unread, such a pod would get
GPUs past every TenantQuota and accelerator-type RBAC rule (SPEC section 9: quotas count DRA devices like
device-plugin GPUs). This module reads what those claims ask for, purely:

- `foreign_claims`: the pod's `spec.resourceClaims` entries KGWE did not render (its own `kgwe-gpu-*`
  claims are counted through `kgwe.io/dra-claims`, policies/gpu_demand.py);
- `requested_gpus`: the GPU devices a claim's spec asks for, before allocation. A request counts when its
  DeviceClass can give GPUs (`GpuClasses`); `ExactCount` counts `count`, `All` counts the most devices
  one node publishes, `firstAvailable` counts its largest GPU alternative. The type is not known before
  allocation, so every device counts as one whole GPU (a MIG device too): never less than it can take;
- `allocated_gpus`: the devices an allocated claim holds (`status.allocation.devices.results`), each
  with its type and worth from the ResourceSlices (a MIG device counts its compute slices / 7).

Everything read here is bounded by the API's own limits (32 claims per pod, 32 requests per claim, 8
alternatives per request); anything past them, or of the wrong shape, is a problem, never a silent zero.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Literal

from policies.gpu_demand import DRA_CLAIM_PREFIX, SEVEN, dra_rendered, mig_compute_slices
from policies.vocabulary.objects import PodView, pod_view
from webhook.claim_names import MAX_NAME, MAX_POD_CLAIMS, object_name
from webhook.cluster.claim_charging import HeldGpu
from webhook.cluster.device_classes import IMPLICIT_PREFIX, mapped_resources
from webhook.cluster.model import ClusterModel
from webhook.cluster.node_devices import DraDevice
from webhook.dra.compute_domain import CHANNEL_CLAIM, channel_template
from webhook.dra.gpu_classes import GPU_DRIVERS, GpuClasses
from webhook.dra.render import claim_name
from webhook.dra_rendering import DraRendering

MAX_REQUESTS = 32  # DeviceClaim.requests
MAX_ALTERNATIVES = 8  # DeviceRequest.firstAvailable
MAX_RESULTS = 32 * 8  # results of one allocation: at most one per requested device, bounded generously

ClaimKind = Literal["ResourceClaimTemplate", "ResourceClaim"]


@dataclass(frozen=True)
class ClaimRef:
    """One `spec.resourceClaims` entry of a pod: the pod's name for it and what it names."""

    entry: str
    kind: ClaimKind
    name: str
    # A template another controller writes after the pod's admission (a gang's IMEX channel template, by
    # NVIDIA's ComputeDomain controller): not there yet is no refusal, but when it is there it is read.
    awaited: bool = False


@dataclass
class ForeignClaims:
    """The claims of a pod that KGWE did not render, the DRA devices it asks as extended resources
    (`extended`: claim specs like the one the scheduler makes for them), and what is wrong with either."""

    refs: list[ClaimRef] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    extended: list[tuple[str, dict[str, Any]]] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.refs or self.problems or self.extended)


@dataclass
class RequestedGpus:
    """What claims ask for before allocation: GPU devices (each counted as one whole GPU)."""

    devices: int = 0
    classes: set[str] = field(default_factory=set)  # the GPU DeviceClasses named
    problems: list[str] = field(default_factory=list)


def rendered_by(rendering: DraRendering | None) -> Callable[[str, str], bool]:
    """At admission: a GPU claim is KGWE's when it is exactly one KGWE's rendering of this pod writes (its
    pod claim name and template name). Those templates are KGWE's own content (written by the mutating
    webhook, which refuses a same-named template of other content; the chart's policy lets nobody else
    write `kgwe-` templates), so they need no reading. A gang's channel claim is not among them: see
    `channel_of`."""
    own: set[tuple[str, str]] = set()
    if rendering is not None:
        own = {(claim, rendering.template_name(claim)) for claim in rendering.templates}
    return lambda entry, template: (entry, template) in own


def channel_of(rendering: DraRendering | None) -> Callable[[str, str], bool]:
    """At admission: the gang's IMEX channel claim KGWE's rendering of this pod names. Its template is
    written by NVIDIA's ComputeDomain controller, not by KGWE, under a name anyone can compute (the domain's
    name is a hash of namespace, gang and size), and the pod creator may write one under that name first:
    so it is read like the creator's own claims, except that not existing yet is expected."""
    channel: tuple[str, str] | None = None
    if rendering is not None and rendering.compute_domain is not None:
        channel = (CHANNEL_CLAIM, channel_template(rendering.compute_domain))
    return lambda entry, template: (entry, template) == channel


def recorded_by_kgwe(pod: PodView | Mapping[str, Any]) -> Callable[[str, str], bool]:
    """For a pod already admitted: KGWE's claims are the GPU claims its rendering recorded in
    `kgwe.io/dra-claims` (an output `/validate` checked at creation), naming a `kgwe-` template. Anything
    else, a `kgwe-` name of the creator's or a gang's channel claim included, is read (a channel's class
    gives no GPU, so it counts nothing)."""
    own = {claim_name(container) for container in dra_rendered(pod)}
    return lambda entry, template: entry in own and template.startswith(DRA_CLAIM_PREFIX)


# Every DeviceClass is also the extended resource `deviceclass.resource.kubernetes.io/<class name>`, and a
# class may name one of its own (`spec.extendedResourceName`, KEP-5004): a pod asking for it gets that many
# devices of the class through a claim the scheduler makes (`status.extendedResourceClaimStatus`).
_WHOLE = re.compile(r"[0-9]{1,18}")


def extended_requests(
    pod: PodView | Mapping[str, Any], mapped: Mapping[str, str], problems: list[str]
) -> list[tuple[str, dict[str, Any]]]:
    """The DRA devices the pod's containers and init containers ask for as extended resources, each as the
    claim spec the scheduler makes for it (`ExactCount` of that class). Every container counts (an init
    container's devices too: never less than the pod can hold); a quantity that is not a whole number is a
    problem (the API server accepts only whole extended resources)."""
    specs: list[tuple[str, dict[str, Any]]] = []
    for container in pod_view(pod).all_containers:
        limits, requests = container.amounts()
        for name in sorted({*limits, *requests}, key=str):
            if not isinstance(name, str):
                continue
            device_class = name[len(IMPLICIT_PREFIX):] if name.startswith(IMPLICIT_PREFIX) else mapped.get(name)
            if device_class is None:
                continue
            where = f"container {container.name[:63]!r}: {name[:MAX_NAME]}"
            value = limits.get(name, requests.get(name))
            text = str(value) if isinstance(value, (int, str)) and not isinstance(value, bool) else ""
            if object_name(device_class) is None or not _WHOLE.fullmatch(text):
                problems.append(f"{where}: {str(value)[:40]!r} is not a whole number of devices of a DeviceClass")
                continue
            if int(text):
                request = {"name": "extended", "exactly": {"deviceClassName": device_class, "count": int(text)}}
                specs.append((where, {"devices": {"requests": [request]}}))
    return specs


def own_dra_asks(
    pod: PodView | Mapping[str, Any],
    rendering: DraRendering | None,
    device_classes: Mapping[str, Mapping[str, Any]],
) -> ForeignClaims:
    """At admission: what the pod asks of DRA on its own, past KGWE's intent: its claims except the ones
    KGWE rendered for it (`rendered_by`, `channel_of`), and DRA devices asked as extended resources."""
    view = pod_view(pod)
    found = ForeignClaims()
    if view.spec.get("resourceClaims") is not None:
        found = foreign_claims(view, rendered_by(rendering), channel_of(rendering))
    found.extended = extended_requests(view, mapped_resources(device_classes), found.problems)
    return found


def foreign_claims(
    pod: PodView | Mapping[str, Any],
    is_own: Callable[[str, str], bool],
    awaited: Callable[[str, str], bool] | None = None,
) -> ForeignClaims:
    """The pod's `spec.resourceClaims` entries other than KGWE's own (`is_own(entry, template)`); those
    `awaited(entry, template)` names are marked `awaited` (written by another controller later)."""
    entries = pod_view(pod).spec.get("resourceClaims")
    found = ForeignClaims()
    if entries is None:
        return found
    if not isinstance(entries, list):
        found.problems.append("spec.resourceClaims is not a list")
        return found
    if len(entries) > MAX_POD_CLAIMS:
        found.problems.append(f"spec.resourceClaims has {len(entries)} entries; at most {MAX_POD_CLAIMS}")
        return found
    for index, entry in enumerate(entries):
        where = f"spec.resourceClaims[{index}]"
        if not isinstance(entry, dict):
            found.problems.append(f"{where} is not an object")
            continue
        name = object_name(entry.get("name"))
        template = entry.get("resourceClaimTemplateName")
        claim = entry.get("resourceClaimName")
        if name is None:
            found.problems.append(f"{where} has no name")
            continue
        if template is not None and claim is not None:
            found.problems.append(f"{where} names both a ResourceClaimTemplate and a ResourceClaim")
        elif template is not None:
            if isinstance(template, str) and is_own(name, template):
                continue
            if object_name(template) is None:
                found.problems.append(f"{where}.resourceClaimTemplateName is not a name")
            else:
                later = awaited is not None and awaited(name, template)
                found.refs.append(ClaimRef(name, "ResourceClaimTemplate", template, awaited=later))
        elif claim is not None:
            if object_name(claim) is None:
                found.problems.append(f"{where}.resourceClaimName is not a name")
            else:
                found.refs.append(ClaimRef(name, "ResourceClaim", claim))
        else:
            found.problems.append(f"{where} names neither a ResourceClaimTemplate nor a ResourceClaim")
    return found


def most_devices_on_a_node(model: ClusterModel) -> int:
    """The most GPU and MIG devices one node can hold at once through DRA (what `allocationMode: All` can
    take; partitions of one GPU that share its counters count as many as fit together)."""
    best = 0
    for node in model.nodes.values():
        if node.dra is not None:
            best = max(best, node.dra.most_at_once())
    return best


def _device_count(body: Mapping[str, Any], where: str, all_devices: int, out: RequestedGpus) -> int:
    mode = body.get("allocationMode", "ExactCount")
    if mode == "All":
        return max(all_devices, 1)
    if mode not in ("ExactCount", None):
        out.problems.append(f"{where}.allocationMode {str(mode)[:40]!r} is not ExactCount or All")
        return 0
    count = body.get("count", 1)
    if count is None:
        return 1
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        out.problems.append(f"{where}.count {str(count)[:40]!r} is not a positive whole number")
        return 0
    return count


def requested_gpus(
    specs: Iterable[tuple[str, Any]], classes: GpuClasses, all_devices: int
) -> RequestedGpus:
    """The GPU devices the claim specs (`ResourceClaimSpec`, each with where it came from) ask for.

    Reads `resource.k8s.io/v1` (`exactly`, `firstAvailable`) and the older flat request of v1beta1
    (`deviceClassName` on the request itself).
    """
    out = RequestedGpus()
    for where, spec in specs:
        devices = spec.get("devices") if isinstance(spec, dict) else None
        if devices is None:
            continue  # a claim that asks for no device
        requests = devices.get("requests") if isinstance(devices, dict) else None
        if requests is None:
            continue
        if not isinstance(requests, list) or len(requests) > MAX_REQUESTS:
            out.problems.append(f"{where}: spec.devices.requests is not a list of at most {MAX_REQUESTS}")
            continue
        for index, request in enumerate(requests):
            at = f"{where}: requests[{index}]"
            if not isinstance(request, dict):
                out.problems.append(f"{at} is not an object")
                continue
            exactly = request.get("exactly")
            if exactly is None and "deviceClassName" in request:
                exactly = request
            alternatives = request.get("firstAvailable")
            if isinstance(exactly, dict):
                out.devices += _gpus_of(exactly, at, classes, all_devices, out)
            elif isinstance(alternatives, list) and 0 < len(alternatives) <= MAX_ALTERNATIVES:
                counts = [
                    _gpus_of(alt, f"{at}.firstAvailable[{i}]", classes, all_devices, out)
                    if isinstance(alt, dict) else 0
                    for i, alt in enumerate(alternatives)
                ]
                out.devices += max(counts)
            else:
                out.problems.append(f"{at} has neither `exactly` nor up to {MAX_ALTERNATIVES} `firstAvailable`")
    return out


def _gpus_of(body: Mapping[str, Any], where: str, classes: GpuClasses, all_devices: int, out: RequestedGpus) -> int:
    device_class = body.get("deviceClassName")
    if not isinstance(device_class, str) or device_class not in classes:
        return 0
    count = _device_count(body, where, all_devices, out)
    if count:
        out.classes.add(device_class[:MAX_NAME])
    return count


def devices_by_key(model: ClusterModel) -> dict[tuple[str, str, str], DraDevice]:
    """Every GPU and MIG device the ResourceSlices publish, by (driver, pool, device)."""
    found: dict[tuple[str, str, str], DraDevice] = {}
    for node in model.nodes.values():
        if node.dra is not None:
            for device in (*node.dra.gpus, *node.dra.mig):
                found[device.key] = device
    return found


def allocated_gpus(
    claim: Mapping[str, Any],
    devices: Mapping[tuple[str, str, str], DraDevice],
    drivers: Iterable[str] = GPU_DRIVERS,
    skip_requests: Collection[str] = (),
) -> list[HeldGpu] | None:
    """The GPU devices an allocated claim holds; None when it is not allocated.

    A result of a GPU driver that the slices do not describe (an AMD GPU, a slice not seen yet) counts as
    one whole GPU of an unknown type (`type_id` empty). Results of the requests named in `skip_requests`
    (a `firstAvailable` subrequest's result `request/subrequest` by its request) are left out.
    """
    status = claim.get("status")
    allocation = status.get("allocation") if isinstance(status, dict) else None
    if not isinstance(allocation, dict):
        return None
    results = allocation.get("devices", {}).get("results") if isinstance(allocation.get("devices"), dict) else None
    if not isinstance(results, list):
        return []
    gpu_drivers = tuple(drivers)
    held: list[HeldGpu] = []
    for result in results[:MAX_RESULTS]:
        if not isinstance(result, dict) or result.get("driver") not in gpu_drivers:
            continue
        if skip_requests and str(result.get("request", "")).split("/", 1)[0] in skip_requests:
            continue
        key = (str(result.get("driver")), str(result.get("pool", "")), str(result.get("device", "")))
        device = devices.get(key)
        if device is None:
            held.append(HeldGpu("", Decimal(1), None))
        elif device.kind == "mig":
            slices = Decimal(mig_compute_slices(device.profile or ""))
            held.append(HeldGpu(device.type_id, slices / SEVEN, device.memory_bytes, mig=True))
        else:
            held.append(HeldGpu(device.type_id, Decimal(1), device.memory_bytes))
    return held
