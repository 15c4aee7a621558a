"""The mutation steps: each renders one part of the placement plan (or attribution) into the pod.

Each step belongs to a mutator of webhook/mutation/mutators.py, which declares the paths it may write;
the pipeline checks every run against those declarations.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from policies.vocabulary.objects import container_amounts
from policies.vocabulary.quantities import parse_quantity
from webhook.mutation.mutators import (
    GANG_MUTATOR,
    GPU_RESOURCES_MUTATOR,
    MPS_ENV_MUTATOR,
    NODE_CONSTRAINTS_MUTATOR,
    OUTPUT_ANNOTATIONS_MUTATOR,
    OUTPUT_LABELS_MUTATOR,
    PROFILE_QUEUE_MUTATOR,
    SCHEDULING_GATES_MUTATOR,
    SCHEDULING_GROUP_MUTATOR,
)
from webhook.mutation.pipeline import Step
from webhook.ordered_seam import OrderedSeam
from webhook.placement.constraints import (
    apply_preferences,
    apply_requirements,
    apply_tolerations,
    mapping_at,
)
from webhook.placement.plan import PlacementPlan
from webhook.placement.profile_resources import KUEUE_QUEUE_LABEL, ProfileResources, apply_defaults, queue_to_add


@dataclass
class Outputs:
    """KGWE's output annotations for this pod; None means the key must be absent."""

    values: dict[str, str | None]


def _annotations(pod: dict[str, Any]) -> dict[str, Any]:
    metadata = mapping_at(pod, "metadata")
    notes = metadata.get("annotations")
    if not isinstance(notes, dict):
        notes = {}
        metadata["annotations"] = notes
    return notes


def _drop_empty_annotations(pod: dict[str, Any]) -> None:
    metadata = pod.get("metadata") or {}
    if "annotations" in metadata and not metadata["annotations"]:
        del metadata["annotations"]


def output_annotations_step(outputs: Outputs) -> Step:
    """Output-annotation ownership: KGWE's keys hold exactly KGWE's values; what users set is replaced."""

    def step(pod: dict[str, Any]) -> None:
        metadata = pod.get("metadata")
        had = isinstance(metadata, dict) and "annotations" in metadata
        notes = _annotations(pod)
        for key, value in outputs.values.items():
            if value is None:
                notes.pop(key, None)
            elif notes.get(key) != value:
                notes[key] = value
        if not had:
            _drop_empty_annotations(pod)

    return OUTPUT_ANNOTATIONS_MUTATOR.step(step)


def output_labels_step(labels: dict[str, str | None]) -> Step:
    """Label ownership: KGWE's labels hold exactly KGWE's values; None means the label must be absent."""

    def step(pod: dict[str, Any]) -> None:
        metadata = mapping_at(pod, "metadata")
        current = metadata.get("labels")
        current = current if isinstance(current, dict) else {}
        wanted = dict(current)
        for key, value in labels.items():
            if value is None:
                wanted.pop(key, None)
            else:
                wanted[key] = value
        if wanted != current:
            metadata["labels"] = wanted

    return OUTPUT_LABELS_MUTATOR.step(step)


def placement_steps(plan: PlacementPlan, gates: Sequence[str] = ()) -> list[Step]:
    """The steps rendering `plan` into a pod, one per mutator with something to write; `gates` are scheduling
    gates other than the plan's (the quota's) added with them."""
    steps: list[Step] = []
    if plan.requirements or plan.type_alternatives or plan.preferences or plan.tolerations:
        steps.append(NODE_CONSTRAINTS_MUTATOR.step(lambda pod: _apply_node_constraints(pod, plan)))
    if plan.env:
        steps.append(MPS_ENV_MUTATOR.step(lambda pod: _set_env(pod, plan.env)))
    if plan.labels:
        # The gang label is output-labels' (its owner); rendered here too so the plan's steps alone (what
        # /validate compares a pod against) write it. In a full pipeline it repeats the same value.
        steps.append(output_labels_step(dict(plan.labels)))
    if plan.pod_affinity_terms or plan.annotations:
        steps.append(GANG_MUTATOR.step(lambda pod: _apply_gang(pod, plan)))
    if plan.scheduling_gates or gates:
        steps.append(scheduling_gates_step([*plan.scheduling_gates, *gates]))
    if plan.resource_renames or plan.dra is not None:
        # Last: mps-env reads which containers ask for GPUs, and DRA claims take those resources away.
        steps.append(GPU_RESOURCES_MUTATOR.step(lambda pod: _gpu_resources(pod, plan)))
    return steps


def _gpu_resources(pod: dict[str, Any], plan: PlacementPlan) -> None:
    """Device plugin: MIG resources instead of `nvidia.com/gpu`; DRA: claims instead of GPU resources."""
    for _name, write in GPU_RESOURCE_WRITERS.steps:
        write(pod, plan)


def _mig_resources(pod: dict[str, Any], plan: PlacementPlan) -> None:
    if plan.resource_renames:
        _rename_resources(pod, plan.resource_renames)


# What the `gpu-resources` mutator writes, in order: the device plugin's MIG resource names, then the DRA
# wing's claims (webhook/dra/mutator.py), which the assembly registers at its name.
GpuResourceWriter = Callable[[dict[str, Any], PlacementPlan], None]
GPU_RESOURCE_WRITERS: OrderedSeam[GpuResourceWriter] = OrderedSeam(
    "gpu-resources writers", ("mig-resources", "dra-claims"), {"mig-resources": _mig_resources}
)


def _apply_node_constraints(pod: dict[str, Any], plan: PlacementPlan) -> None:
    apply_requirements(pod, plan.requirements)
    if plan.type_alternatives:
        _and_alternatives(pod, plan.type_alternatives)
    apply_preferences(pod, plan.preferences)
    apply_tolerations(pod, plan.tolerations)


def _and_alternatives(pod: dict[str, Any], alternatives: list[list[Any]]) -> None:
    """Several types selected by different label keys: each existing term times each alternative.

    A term that already holds one alternative whole (from an earlier pass) is left alone, so a second
    pass adds nothing.
    """
    required = mapping_at(pod, "spec", "affinity", "nodeAffinity", "requiredDuringSchedulingIgnoredDuringExecution")
    terms = required.get("nodeSelectorTerms") or [{}]
    wanted = [[r.as_expression() for r in alternative] for alternative in alternatives]
    new_terms = []
    for term in terms:
        expressions = list(term.get("matchExpressions") or [])
        if any(all(e in expressions for e in alternative) for alternative in wanted):
            new_terms.append(term)
            continue
        for alternative in wanted:
            combined = expressions + [e for e in alternative if e not in expressions]
            new_terms.append({**term, "matchExpressions": combined})
    if new_terms != terms:
        required["nodeSelectorTerms"] = new_terms


def _containers(pod: dict[str, Any]) -> list[dict[str, Any]]:
    spec = pod.get("spec") or {}
    return [c for c in (spec.get("containers") or []) + (spec.get("initContainers") or []) if isinstance(c, dict)]


def _rename_resources(pod: dict[str, Any], renames: dict[str, str]) -> None:
    for container in _containers(pod):
        resources = container.get("resources") or {}
        for section in ("limits", "requests"):
            values = resources.get(section)
            if not isinstance(values, dict):
                continue
            for old, new in renames.items():
                if old in values:
                    amount = values.pop(old)
                    # A container that asked for both keeps the sum: no device the user asked for is dropped.
                    values[new] = _add_counts(values[new], amount) if new in values else amount


def _add_counts(first: Any, second: Any) -> str:
    try:
        return str(int(parse_quantity(first) + parse_quantity(second)))
    except ValueError:
        return str(first)


def _asks_gpu(container: dict[str, Any]) -> bool:
    return any(
        isinstance(key, str) and key.startswith("nvidia.com/")
        for amounts in container_amounts(container)
        for key in amounts
    )


def _set_env(pod: dict[str, Any], env: dict[str, str]) -> None:
    for container in (pod.get("spec") or {}).get("containers") or []:
        if not isinstance(container, dict) or not _asks_gpu(container):
            continue
        current = list(container.get("env") or [])
        names = {e.get("name"): i for i, e in enumerate(current) if isinstance(e, dict)}
        for name, value in env.items():
            entry = {"name": name, "value": value}
            if name in names:
                # MPS client settings may only tighten the daemon's limits; KGWE's value is the pod's share.
                current[names[name]] = entry
            else:
                current.append(entry)
        container["env"] = current


def _apply_gang(pod: dict[str, Any], plan: PlacementPlan) -> None:
    if plan.annotations:
        notes = _annotations(pod)
        notes.update(plan.annotations)
    if plan.pod_affinity_terms:
        affinity = mapping_at(pod, "spec", "affinity", "podAffinity")
        required = list(affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or [])
        for term in plan.pod_affinity_terms:
            if term not in required:
                required.append(term)
        affinity["requiredDuringSchedulingIgnoredDuringExecution"] = required


def scheduling_gates_step(names: Sequence[str]) -> Step:
    """KGWE's scheduling gates, each added once after the pod's own (Kubernetes lets gates be set only at CREATE)."""
    wanted = list(dict.fromkeys(names))

    def step(pod: dict[str, Any]) -> None:
        spec = mapping_at(pod, "spec")
        gates = list(spec.get("schedulingGates") or [])
        present = {g.get("name") for g in gates if isinstance(g, dict)}
        missing = [{"name": gate} for gate in wanted if gate not in present]
        if missing:
            spec["schedulingGates"] = gates + missing

    return SCHEDULING_GATES_MUTATOR.step(step)


def scheduling_group_step(pod_group: str) -> Step:
    """`spec.schedulingGroup.podGroupName` (native gang scheduling), on a pod that names no group of its own."""

    def step(pod: dict[str, Any]) -> None:
        spec = mapping_at(pod, "spec")
        if not spec.get("schedulingGroup"):
            spec["schedulingGroup"] = {"podGroupName": pod_group}

    return SCHEDULING_GROUP_MUTATOR.step(step)


def profile_steps(profile: ProfileResources) -> list[Step]:
    """A HardwareProfile's default counts and LocalQueue (webhook/placement/profile_resources.py). They run
    first: placement then renames the defaulted GPU like one the user wrote (MIG, DRA)."""
    steps: list[Step] = []
    if any(bound.default is not None for bound in profile.bounds):
        # The defaults are how containers ask for GPUs (and cpu, memory): gpu-resources' paths.
        steps.append(GPU_RESOURCES_MUTATOR.step(lambda pod: apply_defaults(pod, profile)))
    if profile.queue is not None:
        def queue(pod: dict[str, Any]) -> None:
            name = queue_to_add(pod, profile)
            if name is not None:
                labels = pod.setdefault("metadata", {}).get("labels")
                if not isinstance(labels, dict):
                    labels = pod["metadata"]["labels"] = {}
                labels[KUEUE_QUEUE_LABEL] = name

        steps.append(PROFILE_QUEUE_MUTATOR.step(queue))
    return steps


def decision_document(plan: PlacementPlan, stale_nodes: int, policy_name: str | None) -> str:
    doc: dict[str, Any] = {"v": 1, "steps": [s for s in plan.steps]}
    if plan.types:
        doc["types"] = plan.types
    if plan.sharing != "exclusive":
        doc["sharing"] = plan.sharing
    if plan.mig_profile:
        doc["mig"] = f"{plan.mig_profile}/{plan.mig_strategy}"
    if plan.dra is not None:
        doc["dra"] = sorted({plan.dra.template_name(c) for c in plan.dra.templates})
    if plan.gpu_fraction is not None:
        doc["fraction"] = str(plan.gpu_fraction)
    if plan.nvlink:
        doc["nvlink"] = True
    if plan.gang:
        doc["gang"] = plan.gang
    if plan.profile:
        doc["profile"] = plan.profile
    decided = dict(plan.decided_by)
    if policy_name and not decided:
        decided["placement"] = policy_name
    if decided:
        doc["by"] = dict(sorted(decided.items()))
    if stale_nodes:
        doc["topology"] = f"stale on {stale_nodes} node(s): GFD labels used"
    return orjson.dumps(doc).decode()
