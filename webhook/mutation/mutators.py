"""Mutators and the JSON paths they own.

Every mutation step belongs to a mutator declared here with the paths it may write. Mutators are
registered per pipeline (the CREATE pipeline of webhook/admission/mutate.py `_steps`, and the UPDATE one
that restores `kgwe.io/` keys); registering a mutator whose paths overlap another's in the same pipeline
raises `OwnershipConflict` naming both, so two mutators can never fight over one field, and a conflict
is an import-time error rather than a pipeline that does not converge.

At run time `check_patch` (called by webhook/mutation/pipeline.py on every run) attributes each path of
the final patch to its owner: a path nobody owns, a path whose owner is not in the run, or a path whose
owner changed nothing means a step wrote outside its paths, and raises `OwnershipViolation`.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass
from typing import Any

from policies.vocabulary.keys import ACCELERATOR, GPU_FRACTION, GPU_MEMORY, PROFILE, RIGHTSIZED_FROM, SHARING
from webhook.intent import LABEL_GANG, OUTPUT_ANNOTATIONS
from webhook.mutation.paths import OwnerIndex, PathPattern, pointer, tokens_of, written_paths
from webhook.placement.kueue import KUEUE_QUEUE_LABEL, KUEUE_REQUIRED_TOPOLOGY

Step = tuple[str, Callable[[dict[str, Any]], None]]
# The intent rightsizing rewrites (webhook/admission/rightsizing.py keeps the same tuple).
SIZING_KEYS = (ACCELERATOR, PROFILE, GPU_MEMORY, SHARING, GPU_FRACTION)


class OwnershipConflict(ValueError):
    """Two mutators of one pipeline declare overlapping paths."""


class OwnershipViolation(RuntimeError):
    """A mutation step wrote a path outside those its mutator declared (a KGWE bug, never user input)."""


@dataclass(frozen=True)
class Mutator:
    """A named mutation step kind and the paths it owns (patterns, see webhook/mutation/paths.py)."""

    name: str
    owns: tuple[PathPattern, ...]
    pipeline: str
    description: str = ""

    def step(self, apply: Callable[[dict[str, Any]], None]) -> Step:
        """A pipeline step of this mutator, applying `apply` to the working pod."""
        return (self.name, apply)


_BY_NAME: dict[str, Mutator] = {}
REGISTRIES: dict[str, MutatorRegistry] = {}
# Runs repeat a handful of step lists: their index is remembered until a registration changes.
_INDEX_FOR: dict[tuple[str, ...], OwnerIndex | None] = {}


class MutatorRegistry:
    """The mutators of one pipeline; no two own overlapping paths. Names are unique across pipelines."""

    def __init__(self, pipeline: str) -> None:
        if pipeline in REGISTRIES:
            raise ValueError(f"pipeline {pipeline!r} already has a registry")
        self.pipeline = pipeline
        self._mutators: dict[str, Mutator] = {}
        self._index = OwnerIndex()
        REGISTRIES[pipeline] = self

    def register(self, name: str, owns: Iterable[str], description: str = "") -> Mutator:
        """Declare mutator `name` owning the JSON Pointer patterns `owns`; raises `OwnershipConflict`
        when a path overlaps one already owned here (or the name is taken), `ValueError` on a bad pattern."""
        if name in _BY_NAME:
            raise OwnershipConflict(f"mutator {name!r} is already registered (pipeline {_BY_NAME[name].pipeline})")
        patterns = tuple(PathPattern.parse(p) for p in owns)
        if not patterns:
            raise ValueError(f"mutator {name!r} declares no paths")
        for other in self._mutators.values():
            for mine in patterns:
                clash = next((theirs for theirs in other.owns if mine.overlaps(theirs)), None)
                if clash is not None:
                    raise OwnershipConflict(
                        f"mutators {other.name!r} and {name!r} both own {self.pipeline} paths: "
                        f"{clash.pointer} ({other.name}) overlaps {mine.pointer} ({name})"
                    )
        _INDEX_FOR.clear()
        mutator = Mutator(name, patterns, self.pipeline, description)
        self._mutators[name] = mutator
        for pattern in patterns:
            self._index.add(pattern, name)
        _BY_NAME[name] = mutator
        return mutator

    def unregister(self, name: str) -> None:
        """Remove a mutator (tests that register throwaway ones clean up with this)."""
        del self._mutators[name]
        del _BY_NAME[name]
        _INDEX_FOR.clear()
        self._index = OwnerIndex()
        for other in self._mutators.values():
            for pattern in other.owns:
                self._index.add(pattern, other.name)

    @property
    def mutators(self) -> list[Mutator]:
        return list(self._mutators.values())

    def owner_of(self, path: str) -> str | None:
        """The mutator owning the JSON Pointer `path`, None when none does."""
        return self._index.owner_of(tokens_of(path))

    @property
    def index(self) -> OwnerIndex:
        return self._index


def mutator_named(name: str) -> Mutator | None:
    return _BY_NAME.get(name)


def _index_for(steps: tuple[str, ...]) -> OwnerIndex | None:
    """The owner index of the one pipeline all `steps` belong to (None for no steps)."""
    if steps in _INDEX_FOR:
        return _INDEX_FOR[steps]
    mutators = [_BY_NAME.get(name) for name in steps]
    undeclared = [name for name, mutator in zip(steps, mutators, strict=True) if mutator is None]
    if undeclared:
        raise OwnershipViolation(
            f"mutation steps {', '.join(undeclared)} declare no paths (webhook/mutation/mutators.py)"
        )
    pipelines = {m.pipeline for m in mutators if m is not None}
    if len(pipelines) > 1:
        raise OwnershipViolation(f"one run mixes mutators of pipelines {', '.join(sorted(pipelines))}")
    index = REGISTRIES[pipelines.pop()].index if pipelines else None
    if len(_INDEX_FOR) < 256:
        _INDEX_FOR[steps] = index
    return index


def check_patch(patch: Iterable[dict[str, Any]], steps: Collection[str], changed: Collection[str]) -> None:
    """Every path of `patch` (the run's final patch) must be owned by a mutator among `steps` that changed
    the pod. Raises `OwnershipViolation` naming the path and the culprit candidates otherwise."""
    index = _index_for(tuple(steps))
    if index is None:
        return
    writers = set(changed).intersection(steps)
    for op in patch:
        owner, parent = index.lookup(op["path"])
        if owner in writers:
            continue  # the common case, one memo lookup
        for path, piece_owner in written_paths(index, op) if parent else [(op["path"], owner)]:
            if piece_owner is None:
                raise OwnershipViolation(f"{path} changed, and no mutator owns it (steps that changed the pod: "
                                         f"{', '.join(changed) or 'none'})")
            if piece_owner not in writers:
                raise OwnershipViolation(f"{path} changed; it is {piece_owner}'s, which did not change it (steps "
                                         f"that changed the pod: {', '.join(changed) or 'none'})")


def check_step(name: str, ops: Iterable[dict[str, Any]]) -> None:
    """Every path of `ops` (what one step changed) must be owned by that step's mutator (strict mode)."""
    mutator = mutator_named(name)
    if mutator is None:
        raise OwnershipViolation(f"mutation step {name} declares no paths (webhook/mutation/mutators.py)")
    index = REGISTRIES[mutator.pipeline].index
    for op in ops:
        for path, owner in written_paths(index, op):
            if owner != name:
                raise OwnershipViolation(f"mutation step {name} wrote {path}, which is "
                                         f"{repr(owner) + 's' if owner else 'owned by no mutator'}")


# -- the declarations -----------------------------------------------------------------------------------
# CREATE: the steps of a pod's first admission (webhook/admission/mutate.py `_steps`), in run order.
CREATE = MutatorRegistry("create")
OUTPUT_ANNOTATIONS_MUTATOR = CREATE.register(
    "output-annotations",
    [pointer("metadata", "annotations", key) for key in OUTPUT_ANNOTATIONS],
    "KGWE's output annotations hold exactly KGWE's values (type, cost, tenant, decision, requested-by, DRA)",
)
RIGHTSIZING_MUTATOR = CREATE.register(
    "rightsizing",
    [pointer("metadata", "annotations", key) for key in (*SIZING_KEYS, RIGHTSIZED_FROM)],
    "rightsizing.mode auto: the recommended sizing intent, and what was asked in kgwe.io/rightsized-from",
)
OUTPUT_LABELS_MUTATOR = CREATE.register(
    "output-labels",
    [pointer("metadata", "labels", LABEL_GANG)],
    "the gang label: only KGWE's plan sets it, a user's is removed",
)
NODE_CONSTRAINTS_MUTATOR = CREATE.register(
    "node-constraints",
    [pointer("spec", "nodeSelector"), pointer("spec", "affinity", "nodeAffinity"), pointer("spec", "tolerations")],
    "where the pod may run: node selector, node affinity (required and preferred), GPU tolerations",
)
GPU_RESOURCES_MUTATOR = CREATE.register(
    "gpu-resources",
    [
        pointer("spec", "containers") + "/*/resources",
        pointer("spec", "initContainers") + "/*/resources",
        pointer("spec", "resourceClaims"),
    ],
    "how containers ask for GPUs: MIG resources instead of nvidia.com/gpu, or DRA claims; a HardwareProfile's "
    "default counts where the pod sets none",
)
PROFILE_QUEUE_MUTATOR = CREATE.register(
    "profile-queue",
    [pointer("metadata", "labels", KUEUE_QUEUE_LABEL)],
    "a HardwareProfile's Kueue LocalQueue, on a pod that names no queue",
)
MPS_ENV_MUTATOR = CREATE.register(
    "mps-env",
    [pointer("spec", "containers") + "/*/env"],
    "MPS client limits in the environment of containers that ask for GPUs",
)
GANG_MUTATOR = CREATE.register(
    "gang",
    [
        pointer("spec", "affinity", "podAffinity"),
        pointer("metadata", "annotations", KUEUE_REQUIRED_TOPOLOGY),
    ],
    "a gang together: pod affinity on the clique, Kueue's topology request",
)
SCHEDULING_GATES_MUTATOR = CREATE.register(
    "scheduling-gates",
    [pointer("spec", "schedulingGates")],
    "KGWE's scheduling gates: the gang's (kgwe.io/gang) and the quota's (kgwe.io/quota), added at CREATE only",
)
SCHEDULING_GROUP_MUTATOR = CREATE.register(
    "scheduling-group",
    [pointer("spec", "schedulingGroup")],
    "the PodGroup a sized gang's member joins where the Workload API is served, at CREATE only (immutable)",
)

# UPDATE: `kgwe.io/` keys are fixed at creation (webhook/admission/ownership.py `restore_kgwe_keys_step`).
UPDATE = MutatorRegistry("update")
KGWE_KEYS_FIXED_MUTATOR = UPDATE.register(
    "kgwe-keys-fixed",
    [pointer("metadata", "annotations") + "/kgwe.io~1*", pointer("metadata", "labels") + "/kgwe.io~1*"],
    "every kgwe.io/ annotation and label put back as it was before the UPDATE",
)
