"""Who is charged for the GPUs a pod's own ResourceClaims hold (costs, SPEC section 12; docs/costs.md).

A pod holds GPUs through claims of its own (webhook/dra/claimed.py): the ResourceClaims its
`spec.resourceClaims` name, directly (`resourceClaimName`) or as the API server made them from a template
(`status.resourceClaimStatuses`), and the claim the scheduler made for the DRA devices it asks as extended
resources (`status.extendedResourceClaimStatus`). Two kinds of device are left out, because the pod's GPU
demand (policies/gpu_demand.py) prices them already, and a pod is never charged twice for a device:
- KGWE's own rendered claims (recorded in `kgwe.io/dra-claims`, `recorded_by_kgwe`);
- in the scheduler's claim, the results of requests that stand for a GPU resource KGWE counts itself
  (`nvidia.com/gpu` served by DRA, by `requestMappings`); a claim with no mappings of a pod that asks
  such a resource is left out whole.

What an allocated claim holds is `allocated_gpus`: the devices, their types and their worth (a MIG device
its compute slices / 7) that quotas count too. A claim that is not allocated holds nothing and costs
nothing.

Several pods may name one ResourceClaim: its devices are charged once, to one of them (the claim's
*payer*): the earliest started (`status.startTime`, else its creation; then by name) of the pods bound to
a node and not finished that name it; while none of them runs, the earliest started of those bound to a
node (a finished pod's past still counts where lifetimes are charged). The others are charged nothing
for it. Pure, one pass over the snapshot's pods that name claims, once per snapshot.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from policies.gpu_demand import GPU_PREFIXES
from policies.vocabulary.objects import PodView, pod_view
from webhook.claim_names import extended_claim_name, generated_claim_names
from webhook.cluster.claim_charging import ClaimHold
from webhook.cluster.device_classes import IMPLICIT_PREFIX, mapped_resources
from webhook.cluster.model import ClusterModel
from webhook.dra.claimed import MAX_RESULTS, allocated_gpus, devices_by_key, foreign_claims, recorded_by_kgwe

PodKey = tuple[str, str]  # namespace, name
_LAST = "~"  # sorts after every RFC 3339 stamp: a pod with no stamp is the last candidate


@dataclass(frozen=True)
class ClaimUse:
    """One ResourceClaim a pod uses on its own, before looking at the claim."""

    claim: str  # namespace/name
    containers: tuple[str, ...]  # the containers that use it (none named: the pod as a whole)
    skip_requests: frozenset[str] = frozenset()  # requests whose devices the pod's demand prices
    skip_all: bool = False  # the scheduler's claim of a pod that asks GPU resources, with no mappings


def claim_uses(pod: PodView | Mapping[str, Any], mapped: Mapping[str, str]) -> list[ClaimUse]:
    """The ResourceClaims the pod uses on its own (made already: a template's claim once the API server
    named it), KGWE's rendered claims excepted; `mapped` is `mapped_resources` of the DeviceClasses."""
    view = pod_view(pod)
    namespace = view.namespace
    uses: list[ClaimUse] = []
    if view.spec.get("resourceClaims"):
        generated = generated_claim_names(view)
        users: dict[str, list[str]] = {}
        for container in view.all_containers:
            for entry in container.claims:
                name = entry.get("name")
                if isinstance(name, str) and container.name not in users.setdefault(name, []):
                    users[name].append(container.name)
        for ref in foreign_claims(view, recorded_by_kgwe(view)).refs:
            name = ref.name if ref.kind == "ResourceClaim" else generated.get(ref.entry)
            if name:
                uses.append(ClaimUse(f"{namespace}/{name}", tuple(users.get(ref.entry, ()))))
    made = extended_claim_name(view)
    if made:
        uses.append(_extended_use(view, f"{namespace}/{made}", mapped))
    return uses


def _extended_use(view: PodView, claim: str, mapped: Mapping[str, str]) -> ClaimUse:
    status = view.raw.get("status")
    extended = status.get("extendedResourceClaimStatus") if isinstance(status, dict) else None
    mappings = extended.get("requestMappings") if isinstance(extended, dict) else None
    skip: set[str] = set()
    containers: list[str] = []
    for mapping in mappings[:MAX_RESULTS] if isinstance(mappings, list) else ():
        if not isinstance(mapping, dict):
            continue
        resource, request = mapping.get("resourceName"), mapping.get("requestName")
        if isinstance(resource, str) and resource.startswith(GPU_PREFIXES):
            if isinstance(request, str):
                skip.add(request)
        elif isinstance(mapping.get("containerName"), str) and mapping["containerName"] not in containers:
            containers.append(mapping["containerName"])
    asks_gpu_resource = any(
        isinstance(name, str) and name.startswith(GPU_PREFIXES)
        for container in view.all_containers for amounts in container.amounts() for name in amounts
    )
    if not containers:  # no mappings: the containers that ask DRA devices as extended resources
        containers = [
            c.name for c in view.all_containers
            if any(isinstance(n, str) and (n.startswith(IMPLICIT_PREFIX) or n in mapped)
                   for amounts in c.amounts() for n in amounts)
        ]
    return ClaimUse(claim, tuple(containers), frozenset(skip), skip_all=asks_gpu_resource and not mappings)


def _start(view: PodView) -> str:
    started = view.status.get("startTime")
    return started if isinstance(started, str) and started else (view.creation_timestamp or _LAST)


class ClaimHolders:
    """For one snapshot: the payer of every claim its pods name, and what each pod pays for."""

    def __init__(self, model: ClusterModel) -> None:
        self.model = model
        self.mapped = mapped_resources(model.device_classes)
        self.devices = devices_by_key(model)
        self.payers: dict[str, PodKey] = {}
        candidates: dict[str, list[tuple[bool, str, str, PodKey]]] = {}
        for raw in model.pods.values():
            if not _names_claims(raw):
                continue
            view = PodView(raw)
            if not view.node_name:
                continue  # a pod not bound holds nothing yet
            key = (view.namespace, view.name)
            for use in claim_uses(view, self.mapped):
                # Running pods first, then the earliest started, then by name.
                candidates.setdefault(use.claim, []).append((view.terminal, _start(view), view.name, key))
        for claim, pods in candidates.items():
            self.payers[claim] = min(pods)[3]

    def held(self, pod: PodView | Mapping[str, Any]) -> list[ClaimHold]:
        """The allocated claims the pod pays for, with the GPU devices each holds (none: it pays for none)."""
        view = pod_view(pod)
        if not _names_claims(view.raw):
            return []
        key = (view.namespace, view.name)
        out: list[ClaimHold] = []
        for use in claim_uses(view, self.mapped):
            if use.skip_all or self.payers.get(use.claim, key) != key:
                continue
            claim = self.model.resource_claims.get(use.claim)
            gpus = allocated_gpus(claim, self.devices, skip_requests=use.skip_requests) if claim else None
            if gpus:
                out.append(ClaimHold(use.claim, use.containers, tuple(gpus)))
        return out


def _names_claims(raw: Mapping[str, Any]) -> bool:
    spec, status = raw.get("spec"), raw.get("status")
    return bool((isinstance(spec, dict) and spec.get("resourceClaims"))
                or (isinstance(status, dict) and status.get("extendedResourceClaimStatus")))


def claim_holders(model: ClusterModel) -> ClaimHolders:
    """The snapshot's `ClaimHolders`, made once and remembered with the snapshot (`ClusterModel.derived`)."""
    found = model.derived.get(_DERIVED)
    if not isinstance(found, ClaimHolders):
        found = model.derived[_DERIVED] = ClaimHolders(model)
    return found


_DERIVED = "webhook.dra.holders"
