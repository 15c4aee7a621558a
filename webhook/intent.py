"""The user's intent, read from the pod's `kgwe.io/` annotations (SPEC section 2)."""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from policies.gpu_demand import DRA_ANNOTATION
from webhook.quantities import parse_quantity

A_ACCELERATOR = "kgwe.io/accelerator"
A_PROFILE = "kgwe.io/profile"
A_GPU_MEMORY = "kgwe.io/gpu-memory"
A_SHARING = "kgwe.io/sharing"
A_GPU_FRACTION = "kgwe.io/gpu-fraction"
A_TOPOLOGY = "kgwe.io/topology"
A_GANG = "kgwe.io/gang"
INTENT_KEYS = (A_ACCELERATOR, A_PROFILE, A_GPU_MEMORY, A_SHARING, A_GPU_FRACTION, A_TOPOLOGY, A_GANG)

OUT_ACCELERATOR_TYPE = "kgwe.io/accelerator-type"
OUT_HOURLY_COST = "kgwe.io/hourly-cost"
OUT_TENANT = "kgwe.io/tenant"
OUT_DECISION = "kgwe.io/decision"
OUT_DRA_CLAIMS = DRA_ANNOTATION  # the GPU resources a DRA rendering moved into claims (webhook/dra)
OUTPUT_ANNOTATIONS = (OUT_ACCELERATOR_TYPE, OUT_HOURLY_COST, OUT_TENANT, OUT_DECISION, OUT_DRA_CLAIMS)
LABEL_GANG = "kgwe.io/gang"

SHARING_MODES = ("exclusive", "mig", "mps", "time-slicing")
TOPOLOGIES = ("nvlink", "none")


@dataclass
class PodIntent:
    accelerator_types: list[str] = field(default_factory=list)
    profile: str | None = None
    gpu_memory_bytes: Decimal | None = None
    sharing: str | None = None
    gpu_fraction: Decimal | None = None
    topology: str | None = None
    gang: str | None = None
    problems: list[str] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not (
            self.accelerator_types
            or self.profile
            or self.gpu_memory_bytes is not None
            or self.sharing
            or self.gpu_fraction is not None
            or self.topology
            or self.gang
        )

    def as_policy_input(self) -> dict[str, Any]:
        return {
            "acceleratorTypes": list(self.accelerator_types),
            "profile": self.profile,
            "gpuMemory": int(self.gpu_memory_bytes) if self.gpu_memory_bytes is not None else None,
            "sharing": self.sharing,
            "gpuFraction": float(self.gpu_fraction) if self.gpu_fraction is not None else None,
            "topology": self.topology,
            "gang": self.gang,
        }


def annotations_of(pod: dict[str, Any]) -> dict[str, str]:
    raw = (pod.get("metadata") or {}).get("annotations") or {}
    return {str(k): str(v) for k, v in raw.items()} if isinstance(raw, dict) else {}


def parse_intent(pod: dict[str, Any]) -> PodIntent:
    notes = annotations_of(pod)
    intent = PodIntent()
    if notes.get(A_ACCELERATOR, "").strip():
        seen: list[str] = []
        for part in notes[A_ACCELERATOR].split(","):
            type_id = part.strip().lower()
            if type_id and type_id not in seen:
                seen.append(type_id)
        intent.accelerator_types = seen
    if notes.get(A_PROFILE, "").strip():
        intent.profile = notes[A_PROFILE].strip()
    if A_GPU_MEMORY in notes:
        try:
            memory = parse_quantity(notes[A_GPU_MEMORY])
            if memory <= 0:
                raise ValueError
            intent.gpu_memory_bytes = memory
        except ValueError:
            intent.problems.append(
                f"{A_GPU_MEMORY}: {notes[A_GPU_MEMORY]!r} is not a positive quantity (write e.g. 10Gi or 40G)"
            )
    if A_SHARING in notes:
        mode = notes[A_SHARING].strip().lower()
        if mode in SHARING_MODES:
            intent.sharing = mode
        else:
            intent.problems.append(f"{A_SHARING}: {notes[A_SHARING]!r} is not one of {', '.join(SHARING_MODES)}")
    if A_GPU_FRACTION in notes:
        try:
            fraction = Decimal(notes[A_GPU_FRACTION].strip())
            if not (Decimal(0) < fraction <= Decimal(1)):
                raise ValueError
            intent.gpu_fraction = fraction
        except (ValueError, ArithmeticError):
            intent.problems.append(f"{A_GPU_FRACTION}: {notes[A_GPU_FRACTION]!r} must be a number with 0 < f <= 1")
    if A_TOPOLOGY in notes:
        topology = notes[A_TOPOLOGY].strip().lower()
        if topology in TOPOLOGIES:
            intent.topology = topology
        else:
            intent.problems.append(f"{A_TOPOLOGY}: {notes[A_TOPOLOGY]!r} is not one of nvlink, none")
    if notes.get(A_GANG, "").strip():
        gang = notes[A_GANG].strip()
        if len(gang) > 63 or not all(c.isalnum() or c in "-_." for c in gang) or not gang[0].isalnum():
            intent.problems.append(f"{A_GANG}: {gang!r} must be a valid label value (63 characters, alphanumeric, -_.)")
        else:
            intent.gang = gang
    return intent
