"""Who owns which `kgwe.io/` key: KGWE's outputs are KGWE's alone, and every key is fixed at creation.

Output annotations (tenant, price, accelerator type, decision) and the gang label decide what a pod
is charged and what it is co-located with, so a pod creator must never choose them: `/mutate` writes
them, `/validate` refuses a pod whose outputs differ from what KGWE computes for it (the mutating
webhook fails open and may have been skipped). After creation every `kgwe.io/` annotation and label
is immutable like the pod's resources: quota use is computed from them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from types import MappingProxyType
from typing import Any

import orjson

from policies.vocabulary import keys
from policies.vocabulary.objects import PodView, pod_view
from webhook.admission.facts import Facts, stale_nodes
from webhook.admission.request import AdmissionRequest
from webhook.cluster.model import ClusterModel
from webhook.config import Config
from webhook.costs import format_hourly_cost
from webhook.intent import (
    LABEL_GANG,
    OUT_ACCELERATOR_TYPE,
    OUT_DECISION,
    OUT_DRA_CLAIMS,
    OUT_HOURLY_COST,
    OUT_REQUESTED_BY,
    OUT_TENANT,
    OUTPUT_ANNOTATIONS,
)
from webhook.mutation.pipeline import Step
from webhook.mutation.steps import decision_document
from webhook.placement.plan import Decision, PlacementPlan

PREFIX = keys.PREFIX


def expected_outputs(facts: Facts) -> dict[str, str | None]:
    """KGWE's output annotations for the pod of `facts`; None means the key must be absent."""
    plan = facts.plan
    outputs: dict[str, str | None] = dict.fromkeys(OUTPUT_ANNOTATIONS)
    # Who asked: set only where workload admission verified it (webhook/workloads/identity.py).
    outputs[OUT_REQUESTED_BY] = facts.request.requested_by
    if not plan.gpu_pod:
        if facts.asks_own_devices:
            # Claims of its own (or DRA extended resources) may hold GPUs: the tenant is recorded so that quotas
            # of a group-based tenant find the pod (policies/quota/model.py charge_belongs_to).
            outputs[OUT_TENANT] = facts.tenant
        return outputs
    outputs[OUT_TENANT] = facts.tenant
    if not facts.renderable:
        return outputs
    outputs.update(_placed_outputs(facts))
    outputs[OUT_DECISION] = with_via(outputs[OUT_DECISION] or "", facts.request.via)
    return outputs


def _placed_outputs(facts: Facts) -> Mapping[str, str]:
    """The outputs of a placed pod that follow from its plan, the snapshot and its policy decision alone (the
    decision document before `via`, the types, the price, the DRA claims): computed once per plan memo entry,
    from the memo's own plan, for the replicas that share it (the decision is part of the entry's key)."""
    entry = facts.plan_memo
    if entry is None:
        return _plan_outputs(facts.plan, facts.model, facts.decision)
    found: Mapping[str, str] | None = entry.derived.get(_PLACED)
    if found is None:
        found = entry.derived[_PLACED] = MappingProxyType(_plan_outputs(entry.plan, facts.model, facts.decision))
    return found


_PLACED = "ownership.placed-outputs"


def _plan_outputs(plan: PlacementPlan, model: ClusterModel, decision: Decision | None) -> dict[str, str]:
    policy_name = None
    if decision is not None and decision.decided_by:
        policy_name = next(iter(decision.decided_by.values()))
    outputs = {OUT_DECISION: decision_document(plan, stale_nodes(plan, model), policy_name)}
    if plan.types:
        outputs[OUT_ACCELERATOR_TYPE] = ",".join(plan.types)
    if plan.price_per_gpu_hour is not None and plan.gpu_equivalents:
        outputs[OUT_HOURLY_COST] = format_hourly_cost(plan.gpu_equivalents * plan.price_per_gpu_hour)
    if plan.dra is not None:
        outputs[OUT_DRA_CLAIMS] = plan.dra.annotation
    return outputs


def remembered_mismatches(facts: Facts, config: Config) -> list[str]:
    """`output_mismatches` of the pod of `facts` against `expected_outputs(facts)` and the gang label. Those are a
    function of the pod's annotations and labels, its plan, intent, demand, decision and DRA asks, the snapshot
    and the configuration (all in the plan memo entry's key, or found from it), and of the tenant,
    `requested_by` and `via`, which depend on who asks: remembered per entry under those three, found on the
    entry's pod without its identity (replicas.py), whose annotations and labels are the pod's own."""
    entry = facts.plan_memo
    if (entry is None or entry.config is not config or not isinstance(entry.pod.raw, dict)
            or facts.pod is not facts.request.object):
        return _mismatches(facts)
    request = facts.request
    memo: dict[tuple[str, str | None, str], tuple[str, ...]] = entry.derived.setdefault(_MISMATCHES, {})
    key = (facts.tenant, request.requested_by, request.via)
    found = memo.get(key)
    if found is None:
        if len(memo) >= _MISMATCHES_PER_ENTRY:
            memo.clear()
        found = memo[key] = tuple(_mismatches(replace(facts, pod=entry.pod.raw)))
    return list(found)


_MISMATCHES = "ownership.output-mismatches"
_MISMATCHES_PER_ENTRY = 64  # tenants, requesters and `via`s one entry's pod is judged for


def _mismatches(facts: Facts) -> list[str]:
    expected = expected_outputs(facts)
    gang = facts.plan.labels.get(LABEL_GANG) if facts.renderable else None
    pod = facts.request.pod if facts.pod is facts.request.object else PodView(facts.pod)  # the view built at decode
    return output_mismatches(pod, expected, {LABEL_GANG: gang})


def output_mismatches(
    pod: PodView | Mapping[str, Any], annotations: dict[str, str | None], labels: dict[str, str | None]
) -> list[str]:
    """Output keys present on `pod` with a value other than the expected one (absent ones are fine:
    the placement check catches a pod the mutating webhook never saw)."""
    view = pod_view(pod)
    wrong = []
    notes = view.annotations
    for key, value in annotations.items():
        if key in notes and notes[key] != value:
            wrong.append(key)
    present = view.labels
    for key, value in labels.items():
        if key in present and present[key] != value:
            wrong.append(f"label {key}")
    return wrong


def _kgwe_items(obj: PodView | Mapping[str, Any], key: str, outputs_too: bool) -> dict[str, str]:
    view = pod_view(obj)
    return {
        k: v for k, v in (view.annotations if key == "annotations" else view.labels).items()
        if k.startswith(PREFIX) and (outputs_too or k not in OUTPUT_ANNOTATIONS)
    }


def changed_kgwe_keys(old: PodView | Mapping[str, Any], new: PodView | Mapping[str, Any], *,
                      outputs_too: bool) -> list[str]:
    """`kgwe.io/` annotations and labels that differ between `old` and `new` (added, removed, changed).

    With `outputs_too` False, KGWE's output annotations may change (its own controllers write them).
    """
    changed: list[str] = []
    for key, prefix in (("annotations", ""), ("labels", "label ")):
        before = _kgwe_items(old, key, outputs_too or key == "labels")
        after = _kgwe_items(new, key, outputs_too or key == "labels")
        for name in sorted(before.keys() | after.keys()):
            if before.get(name) != after.get(name):
                changed.append(f"{prefix}{name}"[:120])
                if len(changed) >= 8:
                    return changed
    return changed


def restore_kgwe_keys_step(old: PodView | Mapping[str, Any], *, outputs_too: bool) -> Step:
    """A mutation step that puts back the `kgwe.io/` keys of `old` (the object before an UPDATE)."""
    wanted = {key: _kgwe_items(old, key, outputs_too or key == "labels") for key in ("annotations", "labels")}

    def step(pod: dict[str, Any]) -> None:
        metadata = pod.get("metadata")
        if not isinstance(metadata, dict):
            return
        for key, keep in wanted.items():
            current = metadata.get(key)
            current = current if isinstance(current, dict) else {}
            fixed = {
                k: v for k, v in current.items()
                if not (k.startswith(PREFIX) and (outputs_too or key == "labels" or k not in OUTPUT_ANNOTATIONS))
            }
            fixed.update(keep)
            if fixed != current and (fixed or key in metadata):
                metadata[key] = fixed

    return ("kgwe-keys-fixed", step)


def lifted_kgwe_gates(old: PodView | Mapping[str, Any], new: PodView | Mapping[str, Any]) -> list[str]:
    """KGWE's scheduling gates (`kgwe.io/...`) present on `old` and gone from `new`: only KGWE lifts them."""

    def gates(obj: PodView | Mapping[str, Any]) -> set[str]:
        return {name for name in pod_view(obj).scheduling_gates if name.startswith(PREFIX)}

    return sorted(gates(old) - gates(new))


def with_via(decision: str, via: str) -> str:
    """The `kgwe.io/decision` document with `via` added (how the decision was reached: "template")."""
    if not via:
        return decision
    doc = orjson.loads(decision)
    doc["via"] = via
    return orjson.dumps(doc).decode()


def requested_by_refusal(request: AdmissionRequest) -> str:
    """Why a pod or template carrying a `kgwe.io/requested-by` KGWE did not write (or without one) is refused."""
    if request.requested_by is None:
        return (
            f"{OUT_REQUESTED_BY} is written by KGWE: it is kept only on pods a configured controller creates from a "
            "template KGWE admitted in this namespace; remove it"
        )
    return (
        f"{OUT_REQUESTED_BY} is missing or not the one KGWE writes for this requester "
        "(was the mutating webhook skipped?); apply it again"
    )
