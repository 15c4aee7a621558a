"""Workloads judged as the validating webhook would judge their CREATE now (issue 15).

`kgwe audit` and the Workloads view (`/api/v1/workloads`, the UI's Workloads page) share one judgement:
the workload from the cluster model is wrapped in the AdmissionReview the API server would send for its
CREATE (`webhook.review.create_review`, as a dry run, so nothing is reserved or written) and answered
by `runtime.admission` (mutate, then validate the mutated object, as the API server calls them), which
splits it into its pod templates and judges each as a pod made from it. A refusal names the template
path, e.g. `spec.template: ...`.

Only GPU workloads are listed and judged: those with a template asking for GPUs or carrying KGWE intent
annotations, like pods at admission. The model already bounds how many workloads there are
(webhook/cluster/workloads.py); a workload whose shape cannot be read is reported, never guessed at.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import jsonpatch

from policies.gpu_demand import pod_gpu_demand
from policies.vocabulary.objects import ObjectView, PodView
from webhook.audit.findings import AUDIT_USER, Finding
from webhook.cluster.model import ClusterModel
from webhook.intent import A_GANG, parse_intent
from webhook.read_seams import WORKLOAD_READS
from webhook.review import answer_with_outcome, create_review, decoded_patch
from webhook.workload_kinds import KindSpec, KindTable, WorkloadShapeError, extract_templates

if TYPE_CHECKING:
    from webhook.runtime import Runtime

AUDIT_GROUPS = ("system:serviceaccounts",)
# Time one workload's judgement may take (every template is a pod through the whole pipeline).
JUDGE_DEADLINE_SECONDS = 10.0


@dataclass
class GpuTemplate:
    """One pod template of a workload that asks for GPUs (or carries KGWE intent)."""

    path: str
    pods: int | None  # pods it makes at once; None when the kind's count is unknown (DaemonSet)
    gpus_per_pod: int  # whole GPUs each pod asks (MIG slices and shared units are in `other`)
    other: dict[str, str] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"path": self.path, "pods": self.pods, "gpusPerPod": self.gpus_per_pod, "other": self.other}


@dataclass
class WorkloadVerdict:
    """What the Workloads view shows of one GPU workload, and what `kgwe audit` reports of it."""

    kind: str
    api_version: str
    namespace: str
    name: str
    templates: list[GpuTemplate]
    gang: str | None
    admitted: bool
    reason: str  # why KGWE would refuse it now; empty when admitted
    warnings: list[str] = field(default_factory=list)

    @property
    def total_gpus(self) -> int | None:
        """Whole GPUs of all its pods at once; None when a template's pod count is unknown."""
        if any(t.pods is None for t in self.templates):
            return None
        return sum((t.pods or 0) * t.gpus_per_pod for t in self.templates)

    def as_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "apiVersion": self.api_version,
            "namespace": self.namespace,
            "name": self.name,
            "templates": [t.as_dict() for t in self.templates],
            "totalGpus": self.total_gpus,
            "gang": self.gang,
            "admitted": self.admitted,
            "reason": self.reason,
            "warnings": self.warnings,
        }


def _gpu_templates(workload: dict[str, Any], spec: KindSpec) -> list[GpuTemplate]:
    """The templates asking for GPUs or carrying intent; WorkloadShapeError for bad shapes (a count out of
    range included)."""
    templates = extract_templates(workload, spec)
    counts = WORKLOAD_READS.value.pods_per_template(workload, spec, templates)
    found: list[GpuTemplate] = []
    for template, count in zip(templates, counts, strict=True):
        value = template.value
        if any(value.get(part) and not isinstance(value[part], dict) for part in ("metadata", "spec")):
            raise WorkloadShapeError(f"{template.path}: metadata and spec must be objects")
        pod = PodView(value)  # a template is a pod's metadata and spec
        demand = pod_gpu_demand(pod)
        if not demand.asks_gpu and parse_intent(pod).empty:
            continue
        other = {f"mig-{profile}": str(n) for profile, n in demand.mig.items()}
        other.update({name: str(value) for name, value in demand.other.items()})
        found.append(GpuTemplate(template.path, count, demand.whole_gpus, other))
    return found


def judge_workload(runtime: Runtime, workload: dict[str, Any], kinds: KindTable) -> WorkloadVerdict | None:
    """The verdict on one workload of the model; None when it is not a GPU workload of a known kind."""
    view = ObjectView(workload)
    kind, api_version = view.kind, view.api_version
    spec = kinds.by_api_version(api_version, kind)
    if spec is None:
        return None
    namespace, name = view.namespace or "default", view.name
    gang = view.annotation(A_GANG)
    try:
        templates = _gpu_templates(workload, spec)
    except WorkloadShapeError as exc:
        return WorkloadVerdict(kind, api_version, namespace, name, [], gang, False, str(exc))
    if not templates and gang is None:
        return None
    allowed, reason, warnings = _admit(runtime, workload, kinds)
    return WorkloadVerdict(kind, api_version, namespace, name, templates, gang, allowed, reason, warnings)


def _admit(runtime: Runtime, workload: dict[str, Any], kinds: KindTable) -> tuple[bool, str, list[str]]:
    """(allowed, why not, warnings) of a CREATE of `workload` now, through both webhooks as the API server
    calls them: mutate, apply its patch, validate the result. An applied workload's templates already
    carry what KGWE wrote at its admission; mutating first rewrites those outputs for today's decision, so
    the validating webhook's output guard judges today's outputs, not yesterday's. Both are dry runs."""
    mutate_review = create_review(workload, AUDIT_USER, AUDIT_GROUPS, kinds)
    mutate_review["request"]["dryRun"] = True
    mutated, _ = answer_with_outcome(runtime.admission, mutate_review, True, JUDGE_DEADLINE_SECONDS)
    warnings = [str(w) for w in mutated.get("warnings") or []]
    if not mutated["allowed"]:
        return False, str((mutated.get("status") or {}).get("message", "")), warnings
    original = mutate_review["request"]["object"]
    patch = decoded_patch(mutated)
    patched: dict[str, Any] = jsonpatch.apply_patch(original, patch) if patch else original
    validate_review = create_review(patched, AUDIT_USER, AUDIT_GROUPS, kinds)
    validate_review["request"]["dryRun"] = True
    validated, _ = answer_with_outcome(runtime.admission, validate_review, False, JUDGE_DEADLINE_SECONDS)
    warnings = list(dict.fromkeys([*warnings, *(str(w) for w in validated.get("warnings") or [])]))
    allowed = bool(validated["allowed"])
    return allowed, "" if allowed else str((validated.get("status") or {}).get("message", "")), warnings


def workload_verdicts(runtime: Runtime, model: ClusterModel | None = None) -> list[WorkloadVerdict]:
    """Every GPU workload of the snapshot, judged, in (namespace, kind, name) order."""
    model = model or runtime.store.snapshot()
    kinds = WORKLOAD_READS.value.kind_table(runtime.admission.seams)
    excluded = set(runtime.config.excluded_namespaces)
    verdicts: list[WorkloadVerdict] = []
    for workload in model.workloads.values():
        if (ObjectView(workload).namespace or "default") in excluded:
            continue
        verdict = judge_workload(runtime, workload, kinds)
        if verdict is not None:
            verdicts.append(verdict)
    return sorted(verdicts, key=lambda v: (v.namespace, v.kind, v.name))


def _finding(verdict: WorkloadVerdict) -> Finding:
    return Finding("policy", verdict.namespace, verdict.name, "kgwe-workload-admission", "validate", "high",
                   verdict.reason, "fail", kind=verdict.kind, api_version=verdict.api_version)


def workload_findings(runtime: Runtime, model: ClusterModel | None = None) -> list[Finding]:
    """One `policy` finding per GPU workload KGWE would refuse now, its message naming the template."""
    return [_finding(v) for v in workload_verdicts(runtime, model) if not v.admitted]


def audit_workload(runtime: Runtime, workload: dict[str, Any], kinds: KindTable) -> list[Finding]:
    """The finding of one workload of the model (the background audit judges them a slice per tick): none
    when it is not a GPU workload of a known kind, sits in an excluded namespace, or would be admitted."""
    if (ObjectView(workload).namespace or "default") in runtime.config.excluded_namespaces:
        return []
    verdict = judge_workload(runtime, workload, kinds)
    return [_finding(verdict)] if verdict is not None and not verdict.admitted else []
