"""KGWE's intent as DRA requests: a ResourceClaimTemplate per GPU container and the pod's claims.

The plan (webhook/placement/plan.py) has already chosen the types (in the user's order), the MIG
profiles that fit (smallest first) and refused what cannot run; this module writes that choice the DRA
way, for the default scheduler to allocate:

- one request `gpu` per template: a single type or MIG profile as `exactly`, several as
  `firstAvailable` subrequests tried in order (at most 8, the API's limit; the last takes the rest);
- a type is picked by CEL over the driver's `productName` attribute, with the product names the
  cluster's ResourceSlices publish for it; a MIG slice by `profile` and the parent's `productName`;
- each container that asked for GPUs gets its own claim (`kgwe-gpu-<hash of its name>`), so
  containers never share devices they did not ask to share; the GPU extended resources are removed;
- templates are named by their content (`kgwe-<hash>`), in the pod's namespace: the same request
  always names the same template, so creating it is idempotent and pods with equal requests share it.

What the containers asked for is kept in the `kgwe.io/dra-claims` output annotation (see
policies/gpu_demand.py), so quotas, costs and a second admission pass see the same demand.

With the 1.36 device model (webhook/cluster/device_model.py) a request may also carry:
- `tolerations`: the pod's tolerations of device taints its types' devices carry (webhook/dra/tolerations.py);
- `capacity.requests`: a share of a GPU that allows multiple allocations (`kgwe.io/sharing: mps`,
  webhook/dra/shares.py), selected with `device.allowMultipleAllocations`;
- PCIe alignment (`kgwe.io/topology: pcie`): one request per GPU (`gpu-<i>`, or `gpu` for one), each with
  a NIC request (`nic-<i>`) of `dra.nicDeviceClass` and a constraint `matchAttribute:
  resource.kubernetes.io/pcieRoot` over the pair; several GPUs are kept to one product by a constraint
  `matchAttribute: gpu.nvidia.com/productName` over the GPU requests.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import orjson

from policies.gpu_demand import (
    DRA_ANNOTATION,
    DRA_CLAIM_PREFIX,
    GPU,
    MIG_PREFIX,
    container_gpu_amounts,
)
from policies.vocabulary.objects import PodView, pod_view
from webhook.cluster.model import ClusterModel
from webhook.dra.compute_domain import CHANNEL_CLAIM, channel_template
from webhook.dra.facts import NVIDIA_DRIVER, PCIE_ROOT
from webhook.dra.shares import SAMPLE_NODES, ShareAsk, offers, quantity_text
from webhook.dra_rendering import DraRendering
from webhook.wing_config import DraConfig

API_VERSION = "resource.k8s.io/v1"
MAX_SUBREQUESTS = 8
MAX_REQUESTS = 32  # requests (and constraints) per claim: the API's limit
MAX_ALIGNED_GPUS = MAX_REQUESTS // 2  # `kgwe.io/topology: pcie`: a GPU and a NIC request per GPU
PRODUCT_NAME = f"{NVIDIA_DRIVER}/productName"
MANAGED_BY = {"app.kubernetes.io/managed-by": "kgwe"}

__all__ = ["DRA_ANNOTATION", "apply_claims", "render"]


@dataclass(frozen=True)
class Choice:
    """One alternative the claim may be satisfied with: a device class and what selects the device."""

    name: str
    device_class: str
    expression: str
    capacity: tuple[tuple[str, str], ...] = ()  # consumable capacity requests (a share of a GPU)


def _cel_string(value: str) -> str:
    """A CEL string literal (JSON's escaping is valid CEL for the characters product names use)."""
    return orjson.dumps(value).decode()


def _product_test(products: list[str]) -> str:
    attr = f'device.attributes["{NVIDIA_DRIVER}"].productName'
    if len(products) == 1:
        return f"{attr} == {_cel_string(products[0])}"
    return f"{attr} in [{', '.join(_cel_string(p) for p in products)}]"


def _label(text: str) -> str:
    """A DNS label for a subrequest name."""
    return re.sub(r"-+", "-", re.sub(r"[^a-z0-9]+", "-", text.lower())).strip("-")[:63] or "choice"


def type_choices(model: ClusterModel, types: list[str], config: DraConfig) -> list[Choice]:
    choices = []
    for type_id in types:
        products = sorted(model.types[type_id].dra_products)
        if products:
            choices.append(Choice(_label(type_id), config.gpu_device_class, _product_test(products),
                                  whole_capacity(model, type_id)))
    return choices


def whole_capacity(model: ClusterModel, type_id: str) -> tuple[tuple[str, str], ...]:
    """A whole GPU of a type whose GPUs allow multiple allocations: every consumable capacity asked in
    full (the least any of them has), so the device is not shared. Without it such a request would take
    each capacity's `requestPolicy.default` (NVIDIA's consumable shares: one share, no memory) and share
    the GPU with others."""
    full: dict[str, Decimal] = {}
    for node in model.types[type_id].dra_nodes[:SAMPLE_NODES]:
        dra = model.nodes[node].dra
        for device in dra.shared_gpus() if dra is not None else []:
            for name, policy in device.capacities:
                amount = policy.round_up(policy.value) or policy.maximum or policy.value
                full[name] = min(full.get(name, amount), amount)
    return tuple((name, quantity_text(name, amount)) for name, amount in sorted(full.items()))


def mig_choices(model: ClusterModel, types: list[str], profiles: list[str], config: DraConfig) -> list[Choice]:
    choices = []
    for profile in profiles:
        products = sorted({p for t in types if profile in model.types[t].mig for p in model.types[t].dra_products})
        if not products:
            continue
        test = f'device.attributes["{NVIDIA_DRIVER}"].profile == {_cel_string(profile)} && {_product_test(products)}'
        choices.append(Choice(_label(f"mig-{profile}"), config.mig_device_class, test))
    return choices


def share_choices(model: ClusterModel, types: list[str], ask: ShareAsk, config: DraConfig) -> list[Choice]:
    """A share of a GPU of each type whose shared DRA GPUs can give it: a device that allows multiple
    allocations, and the capacity the share consumes."""
    choices = []
    for offer in offers(model, types, ask):
        products = sorted(model.types[offer.type_id].dra_products)
        if products:
            test = f"device.allowMultipleAllocations == true && {_product_test(products)}"
            choices.append(Choice(_label(offer.type_id), config.gpu_device_class, test, offer.requests))
    return choices


def _limited(choices: list[Choice]) -> list[Choice]:
    """At most MAX_SUBREQUESTS: the last one accepts every remaining alternative."""
    if len(choices) <= MAX_SUBREQUESTS:
        return choices
    head, rest = choices[: MAX_SUBREQUESTS - 1], choices[MAX_SUBREQUESTS - 1 :]
    classes = {c.device_class for c in rest}
    if len(classes) != 1:  # pragma: no cover - one plan never mixes whole GPUs and MIG slices
        return choices[:MAX_SUBREQUESTS]
    if len({c.capacity for c in rest}) != 1:  # shares of different amounts cannot be one alternative
        return choices[:MAX_SUBREQUESTS]
    joined = " || ".join(f"({c.expression})" for c in rest)
    return [*head, Choice("others", rest[0].device_class, joined, rest[0].capacity)]


@dataclass(frozen=True)
class RequestShape:
    """What every GPU request of a claim carries besides its choices."""

    tolerations: tuple[dict[str, Any], ...] = ()  # DeviceTolerations (webhook/dra/tolerations.py)
    nic_class: str | None = None  # `kgwe.io/topology: pcie`: each GPU beside a NIC of this class


def _request(name: str, choices: list[Choice], count: int, shape: RequestShape) -> dict[str, Any]:
    def body(choice: Choice) -> dict[str, Any]:
        out: dict[str, Any] = {
            "deviceClassName": choice.device_class,
            "allocationMode": "ExactCount",
            "count": count,
            "selectors": [{"cel": {"expression": choice.expression}}],
        }
        if shape.tolerations:
            out["tolerations"] = [dict(t) for t in shape.tolerations]
        if choice.capacity:
            out["capacity"] = {"requests": dict(choice.capacity)}
        return out

    if len(choices) == 1:
        return {"name": name, "exactly": body(choices[0])}
    return {"name": name, "firstAvailable": [{"name": c.name, **body(c)} for c in _limited(choices)]}


def _devices(choices: list[Choice], count: int, shape: RequestShape) -> dict[str, Any]:
    """A claim's `devices`: one GPU request for all `count` devices; with a NIC class, a GPU and a NIC
    request per GPU, each pair under one PCIe root, and the GPUs of one product."""
    if shape.nic_class is None:
        return {"requests": [_request("gpu", choices, count, shape)]}
    names = ["gpu"] if count == 1 else [f"gpu-{i}" for i in range(count)]
    requests: list[dict[str, Any]] = []
    constraints: list[dict[str, Any]] = []
    for gpu in names:
        nic = gpu.replace("gpu", "nic", 1)
        requests.append(_request(gpu, choices, 1, shape))
        requests.append({"name": nic, "exactly": {"deviceClassName": shape.nic_class, "allocationMode": "ExactCount",
                                                  "count": 1}})
        constraints.append({"requests": [gpu, nic], "matchAttribute": PCIE_ROOT})
    if count > 1:
        constraints.append({"requests": list(names), "matchAttribute": PRODUCT_NAME})
    return {"requests": requests, "constraints": constraints}


def _template(namespace: str, devices: dict[str, Any], types: list[str]) -> dict[str, Any]:
    spec = {"spec": {"devices": devices}}
    digest = hashlib.sha256(orjson.dumps(spec, option=orjson.OPT_SORT_KEYS)).hexdigest()[:20]
    return {
        "apiVersion": API_VERSION,
        "kind": "ResourceClaimTemplate",
        "metadata": {
            "name": f"{DRA_CLAIM_PREFIX}{digest}",
            "namespace": namespace,
            "labels": dict(MANAGED_BY),
            "annotations": {"kgwe.io/accelerator-type": ",".join(types)},
        },
        "spec": spec,
    }


def claim_name(container: str) -> str:
    return f"{DRA_CLAIM_PREFIX}gpu-{hashlib.sha256(container.encode()).hexdigest()[:10]}"


def render(
    pod: PodView | Mapping[str, Any],
    model: ClusterModel,
    config: DraConfig,
    types: list[str],
    mig_profiles: list[str],
    *,
    share: ShareAsk | None = None,
    shape: RequestShape = RequestShape(),
) -> tuple[DraRendering | None, str | None]:
    """The rendering of the plan's choice for `pod`, or a refusal naming what exists: MIG slices of
    `mig_profiles` (smallest first), a `share` of a GPU, else whole GPUs of `types`."""
    if mig_profiles:
        choices = mig_choices(model, types, mig_profiles, config)
    elif share is not None:
        choices = share_choices(model, types, share, config)
    else:
        choices = type_choices(model, types, config)
    if not choices:
        return None, f"DRA: no ResourceSlice publishes {'/'.join(types) or 'a GPU'} with a productName"
    needed = {c.device_class for c in choices} | ({shape.nic_class} if shape.nic_class else set())
    missing = sorted(needed - set(model.device_classes)) if model.device_classes else []
    if missing:
        return None, (
            f"DRA: DeviceClass {', '.join(missing)} does not exist; this cluster has "
            f"{', '.join(sorted(model.device_classes))}"
        )
    namespace = pod_view(pod).namespace or "default"
    rendering = DraRendering()
    for container, amounts in container_gpu_amounts(pod).items():
        devices = sum((v for k, v in amounts.items() if k == GPU or k.startswith(MIG_PREFIX)), Decimal(0))
        if devices <= 0:
            continue
        claim = claim_name(container)
        rendering.claims[container] = claim
        rendering.templates[claim] = _template(namespace, _devices(choices, int(devices), shape), types)
        moved = sorted((k, v) for k, v in amounts.items() if k == GPU or k.startswith(MIG_PREFIX))
        rendering.moved[container] = {k: str(v) for k, v in moved}
    return rendering, None


def apply_claims(pod: dict[str, Any], rendering: DraRendering) -> None:
    """The mutation step: claims in, GPU extended resources out. Applying it twice changes nothing."""
    spec = pod.setdefault("spec", {})
    for container in (spec.get("containers") or []) + (spec.get("initContainers") or []):
        if not isinstance(container, dict):
            continue
        claim = rendering.claims.get(str(container.get("name", "")))
        if claim is None:
            continue
        resources = container.setdefault("resources", {})
        for section in ("limits", "requests"):
            values = resources.get(section)
            if not isinstance(values, dict):
                continue
            for key in [k for k in values if k == GPU or str(k).startswith(MIG_PREFIX)]:
                del values[key]
            if not values:
                del resources[section]
        claims = resources.get("claims")
        if not isinstance(claims, list):
            claims = resources["claims"] = []
        if not any(isinstance(c, dict) and c.get("name") == claim for c in claims):
            claims.append({"name": claim})
    pod_claims = spec.get("resourceClaims")
    if not isinstance(pod_claims, list):
        pod_claims = spec["resourceClaims"] = []
    for claim in rendering.templates:
        wanted = {"name": claim, "resourceClaimTemplateName": rendering.template_name(claim)}
        index = next((i for i, c in enumerate(pod_claims) if isinstance(c, dict) and c.get("name") == claim), None)
        if index is None:
            pod_claims.append(wanted)
        elif pod_claims[index] != wanted:
            pod_claims[index] = wanted
    if rendering.compute_domain is not None:
        _apply_channel(spec, pod_claims, rendering)


def _apply_channel(spec: dict[str, Any], pod_claims: list[Any], rendering: DraRendering) -> None:
    """The gang's IMEX channel: a pod claim from the ComputeDomain's template, on every GPU container."""
    assert rendering.compute_domain is not None
    wanted = {"name": CHANNEL_CLAIM, "resourceClaimTemplateName": channel_template(rendering.compute_domain)}
    index = next((i for i, c in enumerate(pod_claims) if isinstance(c, dict) and c.get("name") == CHANNEL_CLAIM), None)
    if index is None:
        pod_claims.append(wanted)
    else:
        pod_claims[index] = wanted
    for container in (spec.get("containers") or []) + (spec.get("initContainers") or []):
        if not isinstance(container, dict) or str(container.get("name", "")) not in rendering.claims:
            continue
        claims = container["resources"]["claims"]  # apply_claims gave every GPU container its claim list
        if not any(isinstance(c, dict) and c.get("name") == CHANNEL_CLAIM for c in claims):
            claims.append({"name": CHANNEL_CLAIM})
