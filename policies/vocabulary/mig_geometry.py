"""Where MIG instances may sit on one GPU, per GPU model: the slice rules a layout must obey (data only).

A MIG-capable GPU has compute slices and memory slices; a GPU instance of a profile takes a run of memory
slices starting at one of a few fixed places, and its compute slices. Two instances never share a memory
slice, and the compute they take never exceeds the GPU's. So on an A100 `4g+3g`, `3g+2g+1g+1g` and `7x1g`
are valid while `3g+3g+1g` is not: two 3g take all eight memory slices (REFERENCE Part E 3, from the go-nvml
A100 mock vendored in mig-parted, and Part A 2.2 for the profiles of each model).

Per model the data are: which geometry (slice counts and the placements of each instance shape) and how many
memory slices each profile takes. The solver that reads them is webhook/migplan/layouts.py; a new model is a
new row here, never a new code path. The H100/H200 mocks disagree with themselves (REFERENCE Part E 3); the
A100 placements are used for every 7-slice model, as NVIDIA's MIG user guide draws them alike.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class MigGeometry:
    """The slices of one GPU and where an instance of (compute slices, memory slices) may start."""

    name: str
    compute_slices: int
    memory_slices: int
    # (compute slices, memory slices) -> the memory slice indexes an instance of that shape may start at
    starts: dict[tuple[int, int], tuple[int, ...]]


# A100, A800, H100, H200, B200, GB200: 7 compute slices over 8 memory slices. The double-memory 1g
# (1g.20gb on an 80GB GPU) starts where a 2g does, plus the last pair.
SEVEN_SLICE = MigGeometry(
    "seven-slice", 7, 8,
    {(1, 1): (0, 1, 2, 3, 4, 5, 6), (1, 2): (0, 2, 4, 6), (2, 2): (0, 2, 4), (3, 4): (0, 4), (4, 4): (0,),
     (7, 8): (0,)},
)
# A30: 4 compute slices over 4 memory slices.
FOUR_SLICE = MigGeometry("four-slice", 4, 4, {(1, 1): (0, 1, 2, 3), (2, 2): (0, 2), (4, 4): (0,)})


@dataclass(frozen=True)
class MigModelRules:
    """One GPU model's MIG rules: its geometry and the memory slices of each profile it offers."""

    geometry: MigGeometry
    memory_slices: dict[str, int]  # profile -> memory slices (compute slices are in the name: `<c>g.`)
    # The GPU operator's `all-balanced` for the model: what a GPU nobody asks anything of is given.
    balanced: tuple[str, ...] = ()


def _seven(one: str, one_double: str, two: str, three: str, four: str, seven: str) -> MigModelRules:
    return MigModelRules(SEVEN_SLICE, {one: 1, one_double: 2, two: 2, three: 4, four: 4, seven: 8},
                         (one, one, two, three))


# Keyed by accelerator type id (policies/vocabulary/accelerator_types.py); profiles as in Part A 2.2. The `+me`
# profiles (one media-extension instance per GPU) are not planned.
MIG_RULES: dict[str, MigModelRules] = {
    "nvidia-a100-80gb": _seven("1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"),
    "nvidia-h100-80gb": _seven("1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"),
    "nvidia-a100-40gb": _seven("1g.5gb", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"),
    "nvidia-h100-94gb": _seven("1g.12gb", "1g.24gb", "2g.24gb", "3g.47gb", "4g.47gb", "7g.94gb"),
    "nvidia-h200-141gb": _seven("1g.18gb", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb"),
    "nvidia-b200-180gb": _seven("1g.23gb", "1g.45gb", "2g.45gb", "3g.90gb", "4g.90gb", "7g.180gb"),
    "nvidia-gb200-186gb": _seven("1g.23gb", "1g.47gb", "2g.47gb", "3g.93gb", "4g.93gb", "7g.186gb"),
    "nvidia-a30-24gb": MigModelRules(FOUR_SLICE, {"1g.6gb": 1, "2g.12gb": 2, "4g.24gb": 4},
                                     ("1g.6gb", "1g.6gb", "2g.12gb")),
}


def compute_slices(profile: str) -> int:
    """The compute slices of a profile name (`3g.40gb` -> 3)."""
    head = profile.split(".", 1)[0]
    return int(head[:-1]) if head.endswith("g") and head[:-1].isdigit() else 0
