"""The user's intent, read from the pod's `kgwe.io/` annotations (SPEC section 2)."""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from policies.gpu_demand import DRA_ANNOTATION
from policies.vocabulary import keys
from policies.vocabulary.objects import PodView, pod_view
from policies.vocabulary.quantities import parse_quantity

A_ACCELERATOR = keys.ACCELERATOR
A_PROFILE = keys.PROFILE
A_GPU_MEMORY = keys.GPU_MEMORY
A_SHARING = keys.SHARING
A_GPU_FRACTION = keys.GPU_FRACTION
A_TOPOLOGY = keys.TOPOLOGY
A_GANG = keys.GANG
A_GANG_SIZE = keys.GANG_SIZE
A_WORKLOAD = keys.WORKLOAD  # `inference` lets built-in policies pick a MIG slice
INTENT_KEYS = (A_ACCELERATOR, A_PROFILE, A_GPU_MEMORY, A_SHARING, A_GPU_FRACTION, A_TOPOLOGY, A_GANG, A_GANG_SIZE)

OUT_ACCELERATOR_TYPE = keys.ACCELERATOR_TYPE
OUT_HOURLY_COST = keys.HOURLY_COST
OUT_TENANT = keys.TENANT
OUT_DECISION = keys.DECISION
OUT_REQUESTED_BY = keys.REQUESTED_BY  # who asked, signed (webhook/workloads/identity.py)
OUT_DRA_CLAIMS = DRA_ANNOTATION  # the GPU resources a DRA rendering moved into claims (webhook/dra)
OUTPUT_ANNOTATIONS = (
    OUT_ACCELERATOR_TYPE, OUT_HOURLY_COST, OUT_TENANT, OUT_DECISION, OUT_REQUESTED_BY, OUT_DRA_CLAIMS,
)
LABEL_GANG = keys.GANG

SHARING_MODES = keys.SHARING_MODES
TOPOLOGIES = keys.TOPOLOGIES

# Input bounds on what a pod creator writes (see docs/security.md). A preference list longer than the
# number of GPU models anyone runs is an attack, not an intent; checking the length before splitting
# keeps parsing linear in the annotation's size.
MAX_INTENT_VALUE_CHARS = 1024
MAX_ACCELERATOR_TYPES = 16
# Every `kgwe.io/` annotation key KGWE knows (intent, output, and the ones other parts read); any
# other one is most likely a typo and gets a warning naming the closest known key.
KNOWN_ANNOTATION_KEYS: set[str] = {*INTENT_KEYS, *OUTPUT_ANNOTATIONS, A_WORKLOAD, keys.RIGHTSIZING,
                                   keys.RIGHTSIZED_FROM}
MAX_UNKNOWN_KEY_WARNINGS = 3


# More pods than any NVLink system has GPUs (an NVL576 has 576): larger values are typing mistakes, and
# the bound keeps every loop over a gang's members short.
MAX_GANG_SIZE = 1024
_MAX_DIGITS = 6


def parse_gang_size(value: str) -> tuple[int | None, str | None]:
    """(size, None) for a valid `kgwe.io/gang-size`, else (None, the problem in words)."""
    text = value.strip()
    if not text or len(text) > _MAX_DIGITS or not text.isascii() or not text.isdigit():
        return None, f"{A_GANG_SIZE}: {value[:32]!r} must be a whole number of pods from 1 to {MAX_GANG_SIZE}"
    size = int(text)
    problem = gang_size_problem(size)
    return (None, problem) if problem is not None else (size, None)


def gang_size_problem(size: int) -> str | None:
    """Why a gang of `size` pods cannot be, in the words `parse_gang_size` uses; None when it can."""
    if not 1 <= size <= MAX_GANG_SIZE:
        return f"{A_GANG_SIZE}: {size} must be a whole number of pods from 1 to {MAX_GANG_SIZE}"
    return None


@dataclass
class PodIntent:
    accelerator_types: list[str] = field(default_factory=list)
    profile: str | None = None
    gpu_memory_bytes: Decimal | None = None
    sharing: str | None = None
    gpu_fraction: Decimal | None = None
    topology: str | None = None
    gang: str | None = None
    gang_size: int | None = None  # kgwe.io/gang-size: the gang is placed all or nothing (webhook.gangs)
    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    # The problems that break an input bound (docs/security.md "input bounds"), also in `problems`:
    # `/mutate` refuses these as `/validate` does, so nothing half-placed is stored for such a pod.
    out_of_bounds: list[str] = field(default_factory=list)

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
        # Unset fields are null, never empty: policies test absence with `intent_absent`.
        return {
            "acceleratorTypes": list(self.accelerator_types) or None,
            "profile": self.profile,
            "gpuMemory": int(self.gpu_memory_bytes) if self.gpu_memory_bytes is not None else None,
            "sharing": self.sharing,
            "gpuFraction": float(self.gpu_fraction) if self.gpu_fraction is not None else None,
            "topology": self.topology,
            "gang": self.gang,
        }


def annotations_of(obj: PodView | Mapping[str, Any]) -> Mapping[str, str]:
    """The annotations of a pod, a template or any object (its string entries; see PodView.annotations)."""
    return pod_view(obj).annotations


def parse_intent(pod: PodView | Mapping[str, Any]) -> PodIntent:
    """The intent of a pod's annotations, in time linear in their size; bad values become `problems`."""
    notes = pod_view(pod).annotations
    intent = PodIntent()
    for key in INTENT_KEYS:
        value = notes.get(key)
        if value is not None and len(value) > MAX_INTENT_VALUE_CHARS:
            intent.out_of_bounds.append(
                f"{key} is {len(value)} characters long; the limit is {MAX_INTENT_VALUE_CHARS}")
    if intent.out_of_bounds:
        intent.problems.extend(intent.out_of_bounds)
        return intent
    if notes.get(A_ACCELERATOR, "").strip():
        raw = notes[A_ACCELERATOR]
        if raw.count(",") >= MAX_ACCELERATOR_TYPES:
            intent.out_of_bounds.append(
                f"{A_ACCELERATOR} lists {raw.count(',') + 1} types; at most {MAX_ACCELERATOR_TYPES} are allowed"
            )
            intent.problems.append(intent.out_of_bounds[-1])
        else:
            seen: dict[str, None] = {}
            for part in raw.split(","):
                type_id = part.strip().lower()
                if type_id:
                    seen.setdefault(type_id)
            intent.accelerator_types = list(seen)
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
            intent.problems.append(f"{A_TOPOLOGY}: {notes[A_TOPOLOGY]!r} is not one of {', '.join(TOPOLOGIES)}")
    if notes.get(A_GANG, "").strip():
        gang = notes[A_GANG].strip()
        if len(gang) > 63 or not all(c.isalnum() or c in "-_." for c in gang) or not gang[0].isalnum():
            intent.problems.append(f"{A_GANG}: {gang!r} must be a valid label value (63 characters, alphanumeric, -_.)")
        else:
            intent.gang = gang
    if A_GANG_SIZE in notes:
        intent.gang_size, problem = parse_gang_size(notes[A_GANG_SIZE])
        if problem is not None:
            intent.out_of_bounds.append(problem)  # not a whole number from 1 to MAX_GANG_SIZE
        elif intent.gang is None:
            problem = f"{A_GANG_SIZE} needs {A_GANG}: the name of the gang it counts"
        if problem is not None:
            intent.gang_size = None
            intent.problems.append(problem)
    intent.warnings.extend(unknown_key_warnings(notes))
    return intent


def unknown_key_warnings(notes: Mapping[str, str]) -> list[str]:
    """A warning for each unknown `kgwe.io/` annotation key (a typo is otherwise silently ignored)."""
    warnings: list[str] = []
    for key in notes:
        if not key.startswith(keys.PREFIX) or key in KNOWN_ANNOTATION_KEYS:
            continue
        if len(warnings) == MAX_UNKNOWN_KEY_WARNINGS:
            warnings.append("further unknown kgwe.io/ annotations are not listed")
            break
        shown = key[:80]
        close = difflib.get_close_matches(key[:80], sorted(KNOWN_ANNOTATION_KEYS), n=1, cutoff=0.75)
        hint = f"; did you mean {close[0]}?" if close else ""
        warnings.append(f"unknown annotation {shown} is ignored{hint}")
    return warnings
