"""`kgwe review` of any document: a Pod, a workload KGWE admits, or another kind (created unchanged)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from webhook.admission.core import AdmissionService
from webhook.review import ReviewResult, group_version_resource, review_pod
from webhook.workloads.kind import workloads_of


def review_document(
    admission: AdmissionService,
    document: dict[str, Any],
    user: str,
    groups: Sequence[str],
    deadline_seconds: float,
) -> ReviewResult:
    """What the webhooks answer for a CREATE of `document`; a kind KGWE does not admit passes unchanged
    (the webhook configurations do not even send it), so every document of a file gets an answer."""
    kinds = workloads_of(admission).kinds
    try:
        group_version_resource(document, kinds)
    except ValueError as exc:
        return ReviewResult(True, "", [], document, [f"{exc}: the API server does not send it to KGWE"], {})
    return review_pod(admission, document, user, groups, deadline_seconds, kinds)
