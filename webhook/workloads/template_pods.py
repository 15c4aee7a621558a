"""A workload's pod templates as the pods a controller creates from them, and back (SPEC section 7).

`template_pod` makes the pod admission judges from a template (the workload's intent inherited by GPU
templates); `as_template` writes the mutated pod back as the template. Gangs are placed per pod, so a
template keeps only the gang label and the `kgwe.io/gang` and `kgwe.io/gang-size` annotations.
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from policies.gpu_demand import pod_gpu_demand
from policies.vocabulary import keys
from policies.vocabulary.objects import ObjectView, PodView
from webhook.cluster.device_classes import charged_through_claims
from webhook.intent import A_GANG, INTENT_KEYS, LABEL_GANG, annotations_of, parse_gang_size
from webhook.mutation.pipeline import copy_json
from webhook.workload_kinds import Template, WorkloadShapeError
from webhook.workloads.replicas import WorkloadGang

A_GANG_SIZE = keys.GANG_SIZE


def num(value: Decimal) -> str:
    return format(value.normalize(), "f")


def in_kgwe_scope(pod: dict[str, Any], template: dict[str, Any], mapped: Mapping[str, str]) -> bool:
    if pod_gpu_demand(pod).asks_gpu:
        return True
    if charged_through_claims(pod, mapped):
        # Claims of its own, or DRA devices asked as extended resources, may be GPUs (docs/dra.md): its pods,
        # made by a controller, must be judged as the template's author, which only a signed
        # kgwe.io/requested-by tells.
        return True
    return ObjectView(template).has_key_with_prefix(keys.PREFIX) or PodView(pod).has_key_with_prefix(keys.PREFIX)


def intent_of(workload: dict[str, Any]) -> dict[str, str]:
    """The workload's own intent annotations (applied to templates that do not set the key)."""
    notes = annotations_of(workload)
    # The rightsizing opt-out too: `kgwe.io/rightsizing: "off"` on a workload holds for its templates.
    return {key: notes[key] for key in (*INTENT_KEYS, keys.RIGHTSIZING) if key in notes}


def template_pod(template: Template, inherited: dict[str, str], namespace: str) -> dict[str, Any]:
    """The pod a controller creates from `template`, as admission sees it (before a name is given), with
    the workload's intent annotations added where a GPU template does not set the key."""
    value = template.value
    metadata = value.get("metadata")
    spec = value.get("spec")
    if metadata is not None and not isinstance(metadata, dict):
        raise WorkloadShapeError(f"{template.path}.metadata: expected an object")
    if spec is not None and not isinstance(spec, dict):
        raise WorkloadShapeError(f"{template.path}.spec: expected an object")
    pod_metadata = copy_json(metadata or {})
    notes = pod_metadata.get("annotations")
    if notes is not None and not isinstance(notes, dict):
        raise WorkloadShapeError(f"{template.path}.metadata.annotations: expected an object")
    notes = dict(notes or {})
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": pod_metadata, "spec": copy_json(spec or {})}
    # Only GPU templates inherit: a Ray head or a parameter server asking for no GPU must not be steered
    # onto GPU nodes by the intent written for its workers (docs/workloads.md).
    if pod_gpu_demand(pod).asks_gpu:
        for key, val in inherited.items():
            notes.setdefault(key, val)
    if notes:
        pod_metadata["annotations"] = notes
    pod_metadata["namespace"] = namespace
    return pod


def take_gang(pod: dict[str, Any], where: str) -> WorkloadGang | None:
    """Remove the gang intent from a template's pod (gangs are placed per pod) and return the template's own.

    The size is read as a pod's is (`parse_gang_size`): a value its pods would be refused for refuses the
    workload, naming the template, instead of being dropped (which made its pods an ungated gang) or
    raising (`int("²")`: a digit to `str.isdigit`, not to `int`)."""
    notes = (pod.get("metadata") or {}).get("annotations") or {}
    name = str(notes.pop(A_GANG, "") or "").strip()
    raw_size = notes.pop(A_GANG_SIZE, None)
    labels = (pod.get("metadata") or {}).get("labels")
    if isinstance(labels, dict):
        labels.pop(LABEL_GANG, None)
    if not name:
        return None
    if raw_size is None:
        return WorkloadGang(name, 0)
    size, problem = parse_gang_size(str(raw_size))
    if size is None:
        raise WorkloadShapeError(f"{where}: {problem}")
    return WorkloadGang(name, size)


def as_template(original: dict[str, Any], pod: dict[str, Any], gang: WorkloadGang | None) -> dict[str, Any]:
    """The mutated pod written back as the template: its metadata (less the namespace) and spec."""
    template = copy_json(original)
    metadata = copy_json(pod.get("metadata") or {})
    if "namespace" not in ObjectView(original).metadata:
        metadata.pop("namespace", None)
    if gang is not None:
        notes = metadata.setdefault("annotations", {})
        notes[A_GANG] = gang.name
        if gang.size:
            notes[A_GANG_SIZE] = str(gang.size)
        metadata.setdefault("labels", {})[LABEL_GANG] = gang.name
    if metadata or "metadata" in original:
        template["metadata"] = metadata
    if pod.get("spec") or "spec" in original:
        template["spec"] = pod.get("spec") or {}
    return template


def gang_mismatch(template: dict[str, Any], gang: WorkloadGang | None) -> str | None:
    """A workload gang the template does not carry as the mutating webhook writes it (mutation skipped)."""
    if gang is None:
        return None
    view = ObjectView(template)
    wanted_size = str(gang.size) if gang.size else None
    if (view.annotation(A_GANG) != gang.name or view.annotation(A_GANG_SIZE) != wanted_size
            or view.label(LABEL_GANG) != gang.name):
        return f"the gang {gang.name} was not written by KGWE's mutating webhook (skipped?); apply it again"
    return None


def put(workload: dict[str, Any], pointer: tuple[str, ...], value: dict[str, Any]) -> None:
    obj: Any = workload
    for token in pointer[:-1]:
        obj = obj[int(token)] if isinstance(obj, list) else obj[token]
    obj[pointer[-1]] = value
