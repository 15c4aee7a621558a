"""The workloads wing's part of the read side's seam (webhook/read_seams.py `WorkloadReads`): the kind
table the handler admits, pods per template, Kueue's manifests. Registered by
webhook/assembly.py."""

from __future__ import annotations

from typing import Any

from webhook.admission.seams import AdmissionSeams
from webhook.workload_kinds import KindSpec, KindTable, Template, WorkloadShapeError
from webhook.workloads.kind import registered_handler
from webhook.workloads.kueue import kueue_manifests as kueue_manifests
from webhook.workloads.kueue import render_kueue as render_kueue
from webhook.workloads.replicas import CountError
from webhook.workloads.replicas import pods_per_template as count_pods


def kind_table(seams: AdmissionSeams) -> KindTable:
    return registered_handler(seams).kinds


def pods_per_template(workload: dict[str, Any], spec: KindSpec, templates: list[Template]) -> list[int | None]:
    try:
        return count_pods(workload, spec, templates)
    except CountError as exc:  # a shape the read side reports, like any other
        raise WorkloadShapeError(str(exc)) from exc

