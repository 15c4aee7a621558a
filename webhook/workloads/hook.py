"""The workloads wing's before-admission hook: a pod CREATE is judged for whoever asked for it.

A pod a controller makes from a template KGWE admitted is judged for the template's author (its signed
`kgwe.io/requested-by`, webhook/workloads/identity.py), not for the controller's service account.
"""

from __future__ import annotations

from webhook.admission.request import AdmissionRequest
from webhook.workloads.kind import WorkloadKind


class RequesterHook:
    """`WorkloadKind.resolved` before a pod is judged: the handler knows the kinds whose pods it signed."""

    def __init__(self, workloads: WorkloadKind) -> None:
        self.workloads = workloads

    def before(self, request: AdmissionRequest) -> AdmissionRequest:
        return self.workloads.resolved(request)
