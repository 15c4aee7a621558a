"""The GPU shapes this cluster has, and the smallest that holds a need (pure).

A shape is what a pod can ask KGWE for: a MIG slice of a profile some node offers, an MPS share of a type
with MPS nodes, or whole GPUs of a type with exclusive nodes. Its memory is the marketed size in decimal
GB (10^9 bytes), a little less than the GPU or slice really has (an 80 GB H100 has 81,559 MiB, counted as
76,294 MiB; a 1g.10gb slice 9,728 MiB, counted as 9,537): a shape chosen on it never holds less than its
numbers say. Its compute is its share of one GPU's engines (MIG slices/7, an MPS fraction, 1 per GPU).
Its size is its GPU-equivalents and money per hour by SPEC section 6.

The smallest shape is the cheapest per hour when every candidate has a price, else the fewest
GPU-equivalents; ties go by kind (MIG, then whole GPUs, then MPS: isolation first), then by name, so the
choice is the same every time.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from decimal import Decimal
from operator import attrgetter

from policies.vocabulary import keys
from policies.vocabulary.accelerator_types import AcceleratorTable, MigProfile
from webhook.cluster.model import ClusterModel
from webhook.config import Config

MIB_PER_GB = 1e9 / 2**20
# MPS shares are offered in steps of this (a finer share would promise more than MPS can isolate).
MPS_STEP = Decimal("0.05")
KIND_ORDER = {"mig": 0, "gpu": 1, "mps": 2}


@dataclass(frozen=True)
class Shape:
    kind: str  # mig | mps | gpu
    type_id: str
    memory_mib: float  # per device (a slice, a share, one GPU)
    compute: float  # share of one GPU's engines, per device
    gpus: int = 1  # devices of the shape (whole GPUs; 1 for a slice or a share)
    profile: str = ""  # MIG profile
    fraction: Decimal | None = None  # MPS share
    price: Decimal | None = None  # per GPU-hour of the type

    # Worked out once, when the shape is made (not compared, not hashed, not shown).
    equivalents: Decimal = field(init=False, compare=False, repr=False)  # GPU-equivalents (SPEC section 6)
    hourly: Decimal | None = field(init=False, compare=False, repr=False)  # equivalents x price
    rank_priced: tuple[object, ...] = field(init=False, compare=False, repr=False)  # rank(self, True)
    rank_unpriced: tuple[object, ...] = field(init=False, compare=False, repr=False)  # rank(self, False)

    def __post_init__(self) -> None:
        if self.kind == "mig":
            equivalents = Decimal(self.compute_slices) / 7 * self.gpus
        elif self.kind == "mps":
            equivalents = (self.fraction or Decimal(1)) * self.gpus
        else:
            equivalents = Decimal(self.gpus)
        object.__setattr__(self, "equivalents", equivalents)
        object.__setattr__(self, "hourly", equivalents * self.price if self.price is not None else None)
        object.__setattr__(self, "rank_priced", rank(self, True))
        object.__setattr__(self, "rank_unpriced", rank(self, False))

    @property
    def compute_slices(self) -> int:
        return round(self.compute * 7)

    def describe(self) -> str:
        count = f"{self.gpus}x " if self.gpus > 1 else ""
        if self.kind == "mig":
            return f"{count}{self.type_id} MIG {self.profile}"
        if self.kind == "mps":
            return f"{count}{self.type_id} MPS {self.fraction}"
        return f"{self.gpus}x {self.type_id}"

    def intent(self, memory_mib: float) -> dict[str, str]:
        """The `kgwe.io/` annotations that ask KGWE for this shape (the GPU count is the pod's resource)."""
        notes = {keys.ACCELERATOR: self.type_id}
        if self.kind == "mig":
            # Placement picks the smallest profile whose memory holds the ask: asking the profile's own
            # memory lands on this profile (the candidates keep one profile per memory size).
            notes[keys.SHARING] = "mig"
            notes[keys.GPU_MEMORY] = f"{_profile_gb(self.profile)}Gi"
        elif self.kind == "mps":
            notes[keys.SHARING] = "mps"
            notes[keys.GPU_FRACTION] = str(self.fraction)
            notes[keys.GPU_MEMORY] = f"{max(1, math.ceil(memory_mib / 1024))}Gi"
        else:
            notes[keys.SHARING] = "exclusive"
        return notes


@dataclass(frozen=True)
class Need:
    """What a workload's pod needs: memory on its busiest device, memory in all, compute, and devices now."""

    memory_mib: float  # per device, margin included
    total_mib: float  # over all its devices, margin included
    activity: float  # engine activity of its busiest device (0..1)
    gpus: int  # devices it holds now


def _profile_gb(profile: str) -> int:
    return int(profile.split("+")[0].split(".")[-1].removesuffix("gb"))


def cluster_shapes(model: ClusterModel, config: Config, table: AcceleratorTable | None = None) -> list[Shape]:
    """Every shape of one device the cluster offers (MIG profiles, MPS, one whole GPU), per typed type."""
    table = table or model.table
    shapes: list[Shape] = []
    for type_id in model.type_ids():
        summary = model.types[type_id]
        accel = table.get(type_id)
        memory_gb = table.memory_gb(type_id)
        if memory_gb is None:
            continue
        price = config.price_per_gpu_hour(type_id)
        by_memory: dict[int, MigProfile] = {}
        for name in summary.mig:
            info = accel.mig_profile(name) if accel is not None else None
            if info is None or "+" in name:
                continue
            kept = by_memory.get(info.memory_gb)
            if kept is None or info.compute_slices < kept.compute_slices:
                by_memory[info.memory_gb] = info
        for info in by_memory.values():
            shapes.append(Shape("mig", type_id, info.memory_gb * MIB_PER_GB, info.compute_slices / 7,
                                profile=info.name, price=price))
        if summary.mps_nodes:
            shapes.append(Shape("mps", type_id, memory_gb * MIB_PER_GB, 1.0, fraction=Decimal(1), price=price))
        if summary.exclusive_nodes:
            shapes.append(Shape("gpu", type_id, memory_gb * MIB_PER_GB, 1.0, gpus=summary.max_gpus_exclusive_node,
                                price=price))
    return shapes


def _mps_share(shape: Shape, need: Need) -> Shape | None:
    """The smallest MPS share of the shape's GPU that holds the need, or None when only all of it would."""
    wanted = max(need.memory_mib / shape.memory_mib, need.activity)
    steps = max(1, math.ceil(Decimal(str(wanted)) / MPS_STEP - Decimal("1e-9")))
    if MPS_STEP * steps >= 1:
        return None
    return _share(shape.type_id, shape.memory_mib, steps, shape.price)


# The shapes `fitting` offers are made once per distinct size (a workload at a time, 10,000s a report).
@functools.lru_cache(maxsize=4096)
def _share(type_id: str, memory_mib: float, steps: int, price: Decimal | None) -> Shape:
    fraction = MPS_STEP * steps
    return Shape("mps", type_id, float(fraction) * memory_mib, float(fraction), fraction=fraction, price=price)


@functools.lru_cache(maxsize=4096)
def _whole(type_id: str, memory_mib: float, count: int, price: Decimal | None) -> Shape:
    return Shape("gpu", type_id, memory_mib, 1.0, gpus=count, price=price)


def fitting(shapes: list[Shape], need: Need, vendor_of: dict[str, str], vendor: str | None) -> list[Shape]:
    """The shapes (with their device count or share) that hold `need`, among types of `vendor` when given."""
    out: list[Shape] = []
    for shape in shapes:
        if vendor and vendor_of.get(shape.type_id, vendor) != vendor:
            continue
        if shape.kind == "gpu":
            most = shape.gpus  # GPUs of its biggest exclusive node
            for count in range(1, max(1, need.gpus) + 1):
                if count > most:
                    break
                if (shape.memory_mib >= need.memory_mib and count * shape.memory_mib >= need.total_mib
                        and count >= need.activity * need.gpus - 1e-9):
                    out.append(_whole(shape.type_id, shape.memory_mib, count, shape.price))
                    break
            continue
        if need.gpus > 1:
            continue  # a pod of several GPUs is offered fewer whole GPUs, not a slice of one
        if shape.kind == "mig":
            if shape.memory_mib >= need.memory_mib and shape.compute >= need.activity - 1e-9:
                out.append(shape)
        elif shape.kind == "mps":
            share = _mps_share(shape, need)
            if share is not None:
                out.append(share)
    return out


def rank(shape: Shape, priced: bool) -> tuple[object, ...]:
    names = (KIND_ORDER.get(shape.kind, len(KIND_ORDER)), shape.type_id, shape.profile, shape.gpus)
    if priced:
        return (shape.hourly, shape.equivalents, *names)
    return (shape.equivalents, shape.memory_mib, *names)


def smallest(candidates: list[Shape]) -> Shape | None:
    """The smallest of the candidates (see the module docstring), or None when there is none."""
    if not candidates:
        return None
    priced = all(s.price is not None for s in candidates)
    return min(candidates, key=_BY_RANK[priced])


_BY_RANK = {True: attrgetter("rank_priced"), False: attrgetter("rank_unpriced")}
