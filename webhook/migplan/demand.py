"""What MIG slices are wanted, and by whom: pods waiting for slices and workloads recommended onto them.

Pure. A want names the slices it can use per GPU type, because profile names collide across models
(`1g.10gb` is a different slice on an A100-40GB than on an A100-80GB): a pod that says its type (KGWE's
`kgwe.io/accelerator-type`, `kgwe.io/accelerator`, or a product in its nodeSelector) wants that type's
profile; a pod that does not can use the profile on any model that has it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from policies.gpu_demand import pod_gpu_demand
from policies.vocabulary import keys
from policies.vocabulary.accelerator_types import AcceleratorTable
from policies.vocabulary.mig_geometry import MIG_RULES, compute_slices
from policies.vocabulary.objects import PodView
from policies.vocabulary.quantities import GIB, parse_quantity

# How much one slice of each source weighs: a pod that waits now outweighs a workload that would move to a
# slice at its next rollout.
PENDING_WEIGHT = 3
RECOMMENDED_WEIGHT = 2


@dataclass(frozen=True)
class Want:
    """Slices one pod or workload wants: `options` maps each GPU type that would do to its profile there."""

    source: str  # pending | recommended
    who: str  # namespace/pod, or the workload's key
    options: tuple[tuple[str, str], ...]  # (type id, profile)
    slices: int  # instances of the profile

    @property
    def weight(self) -> int:
        return PENDING_WEIGHT if self.source == "pending" else RECOMMENDED_WEIGHT

    def profile_on(self, type_id: str) -> str | None:
        return next((p for t, p in self.options if t == type_id), None)


def _types_named(pod: PodView, table: AcceleratorTable) -> list[str]:
    """The MIG-capable types the pod names, in order; [] when it names none."""
    named = [pod.annotation(keys.ACCELERATOR_TYPE), pod.annotation(keys.ACCELERATOR)]
    product = pod.node_selector.get(keys.NVIDIA_GPU_PRODUCT)
    if product:
        named.append(table.from_product(product.split("-MIG-")[0]))
    return [t for t in dict.fromkeys(n for n in named if n) if t in MIG_RULES]


def _smallest_holding(type_id: str, memory: Decimal | None) -> str | None:
    """The type's smallest profile (memory, then compute) whose `<N>gb` holds `memory`; the smallest without."""
    best: tuple[tuple[int, int], str] | None = None
    for profile in MIG_RULES[type_id].memory_slices:
        gb = int(profile.split(".")[1].removesuffix("gb"))
        if memory is not None and Decimal(gb) * GIB < memory:
            continue
        rank = (gb, compute_slices(profile))
        if best is None or rank < best[0]:
            best = (rank, profile)
    return best[1] if best else None


def _memory(pod: PodView) -> Decimal | None:
    text = pod.annotation(keys.GPU_MEMORY)
    try:
        return parse_quantity(text) if text else None
    except ValueError:
        return None


def pending_wants(pods: Iterable[dict[str, Any]], table: AcceleratorTable) -> list[Want]:
    """Pods not bound to a node yet that ask for MIG slices, or for GPUs with `kgwe.io/sharing: mig`."""
    wants: list[Want] = []
    for raw in pods:
        pod = PodView(raw)
        if pod.node_name or pod.terminal:
            continue
        demand = pod_gpu_demand(pod)
        named = _types_named(pod, table)
        who = f"{pod.namespace}/{pod.name}"
        for profile, count in sorted(demand.mig.items()):
            types = [t for t in named or sorted(MIG_RULES) if profile in MIG_RULES[t].memory_slices]
            if types and count > 0:
                wants.append(Want("pending", who, tuple((t, profile) for t in types), count))
        if demand.whole_gpus and pod.annotation(keys.SHARING) == "mig":
            memory = _memory(pod)
            options = [(t, p) for t in named or sorted(MIG_RULES) if (p := _smallest_holding(t, memory))]
            if options:
                wants.append(Want("pending", who, tuple(options), demand.whole_gpus))
    return wants


def recommended_wants(recommendations: Iterable[Any]) -> list[Want]:
    """Workloads the usage report recommends onto a MIG profile (webhook/usage/recommend.py), one slice per
    pod holding GPUs now (at least one)."""
    wants: list[Want] = []
    for found in recommendations:
        shape = found.recommended
        if not found.change or shape.kind != "mig" or shape.type_id not in MIG_RULES:
            continue
        if shape.profile not in MIG_RULES[shape.type_id].memory_slices:
            continue
        wants.append(Want("recommended", found.workload.key, ((shape.type_id, shape.profile),),
                          max(found.pods_now, 1) * shape.gpus))
    return wants
