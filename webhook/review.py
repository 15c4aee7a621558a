"""`kgwe review`: what the two webhooks would answer for a CREATE of a pod or workload, offline.

It goes through exactly the server's code: the AdmissionReview is built as the API server builds
it, serialized and decoded by `decode_review`, decided by the same `AdmissionService`, rendered by
`render_review`; the mutating answer's patch is applied, and the mutated pod is sent through the
validating path, as the API server does between the two webhooks.
"""

from __future__ import annotations

import base64
import copy
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import jsonpatch
import orjson

from policies.vocabulary.objects import ObjectView
from webhook.admission.core import AdmissionService
from webhook.admission.outcome import Outcome
from webhook.admission.request import API_VERSION, KIND, AdmissionRequest, decode_review
from webhook.admission.response import render_review
from webhook.read_seams import QUOTA_READS, WORKLOAD_READS
from webhook.workload_kinds import KindTable

AUTHENTICATED = "system:authenticated"
DEFAULT_USER = "kgwe-review"


class Admission(Protocol):
    def mutate(self, request: AdmissionRequest, deadline: float | None = None) -> Outcome: ...

    def validate(self, request: AdmissionRequest, deadline: float | None = None) -> Outcome: ...


@dataclass
class ReviewResult:
    allowed: bool
    message: str
    patch: list[dict[str, Any]]
    object: dict[str, Any]
    warnings: list[str]
    audit_annotations: dict[str, str]
    # DRA: the ResourceClaimTemplates the mutating webhook would create for the pod (webhook/dra).
    creates: list[dict[str, Any]] = field(default_factory=list)
    # Quotas (SPEC section 10): "released" or "would wait for quota (why)" for a pod the quota gate holds; in the
    # text form only (SPEC section 6 fixes the keys of `-o json`).
    quota: str | None = None

    def as_json(self) -> dict[str, Any]:
        """The `kgwe review -o json` document (SPEC section 6), plus `resourceClaimTemplates` when the
        pod is written for DRA."""
        document: dict[str, Any] = {
            "allowed": self.allowed,
            "message": self.message,
            "patch": self.patch,
            "object": self.object,
            "warnings": self.warnings,
            "auditAnnotations": self.audit_annotations,
        }
        if self.creates:
            document["resourceClaimTemplates"] = self.creates
        return document


def group_version_resource(
    obj: dict[str, Any], kinds: KindTable | None = None
) -> tuple[dict[str, str], dict[str, str]]:
    """(kind, resource) of `obj` as the API server names them in an AdmissionReview; ValueError when
    its kind is neither a Pod nor a workload kind KGWE admits."""
    api_version = str(obj.get("apiVersion") or "v1")
    kind = str(obj.get("kind") or "Pod")
    group, _, version = api_version.rpartition("/")
    if (group, kind) == ("", "Pod"):
        return {"group": "", "version": version, "kind": "Pod"}, {"group": "", "version": version, "resource": "pods"}
    spec = (kinds or KindTable.build()).lookup(group, kind)
    if spec is None:
        raise ValueError(f"KGWE does not admit {kind} ({api_version})")
    return (
        {"group": group, "version": version, "kind": kind},
        {"group": group, "version": version, "resource": spec.resource},
    )


def create_review(
    pod: dict[str, Any], user: str, groups: Sequence[str], kinds: KindTable | None = None
) -> dict[str, Any]:
    """The AdmissionReview kube-apiserver sends for `kubectl create` of `pod` (or of a workload)."""
    pod = copy.deepcopy(pod)
    metadata = pod.setdefault("metadata", {})
    namespace = metadata.get("namespace") or "default"
    metadata["namespace"] = namespace  # the API server fills it in from the URL before admission
    gvk, gvr = group_version_resource(pod, kinds)
    all_groups = [*groups, *([AUTHENTICATED] if AUTHENTICATED not in groups else [])]
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "request": {
            "uid": str(uuid.uuid4()),
            "kind": gvk,
            "resource": gvr,
            "requestKind": gvk,
            "requestResource": gvr,
            "name": metadata.get("name", ""),
            "namespace": namespace,
            "operation": "CREATE",
            "userInfo": {"username": user, "uid": "", "groups": all_groups, "extra": {}},
            "object": pod,
            "oldObject": None,
            "dryRun": False,
            "options": {"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1"},
        },
    }


def answer(admission: Admission, review: dict[str, Any], mutating: bool, deadline_seconds: float) -> dict[str, Any]:
    """The `response` of one webhook for `review`, as it would travel over HTTP."""
    return answer_with_outcome(admission, review, mutating, deadline_seconds)[0]


def answer_with_outcome(
    admission: Admission, review: dict[str, Any], mutating: bool, deadline_seconds: float
) -> tuple[dict[str, Any], Outcome]:
    """The `response` as it would travel over HTTP, and the outcome behind it."""
    request = decode_review(orjson.dumps(review))
    decide = admission.mutate if mutating else admission.validate
    outcome = decide(request, deadline=time.monotonic() + deadline_seconds)
    rendered = render_review(request.uid, request.api_version, outcome, mutating)
    response: dict[str, Any] = orjson.loads(orjson.dumps(rendered))["response"]
    return response, outcome


def decoded_patch(response: dict[str, Any]) -> list[dict[str, Any]]:
    if not response.get("patch"):
        return []
    ops: list[dict[str, Any]] = orjson.loads(base64.b64decode(response["patch"]))
    return ops


def review_pod(
    admission: Admission,
    pod: dict[str, Any],
    user: str = DEFAULT_USER,
    groups: Sequence[str] = (),
    deadline_seconds: float = 10.0,
    kinds: KindTable | None = None,
) -> ReviewResult:
    """Both webhooks' answers for a CREATE of `pod`, or of a workload of a kind in `kinds`."""
    mutate_review = create_review(pod, user, groups, kinds)
    mutated, mutation = answer_with_outcome(admission, mutate_review, True, deadline_seconds)
    original = mutate_review["request"]["object"]
    if not mutated["allowed"]:
        # The API server stops at a mutating webhook's refusal: the validating webhook is never asked.
        return ReviewResult(
            False, _message(mutated), [], original, mutated.get("warnings", []), mutated.get("auditAnnotations", {})
        )
    patch = decoded_patch(mutated)
    patched: dict[str, Any] = jsonpatch.apply_patch(original, patch) if patch else original
    validated = answer(admission, create_review(patched, user, groups, kinds), False, deadline_seconds)
    warnings = list(dict.fromkeys([*mutated.get("warnings", []), *validated.get("warnings", [])]))
    annotations = {**mutated.get("auditAnnotations", {}), **validated.get("auditAnnotations", {})}
    allowed = bool(validated["allowed"])
    result = ReviewResult(
        allowed, "" if allowed else _message(validated), patch, patched, warnings, annotations, list(mutation.creates)
    )
    runtime = getattr(admission, "runtime", None)
    if allowed and runtime is not None and patched.get("kind", "Pod") == "Pod":
        result.quota = QUOTA_READS.value.queue_answer(runtime.store.snapshot(), runtime.config, patched)
    return result


def review_document(
    admission: AdmissionService,
    document: dict[str, Any],
    user: str,
    groups: Sequence[str],
    deadline_seconds: float,
) -> ReviewResult:
    """`kgwe review` of any document: what the webhooks answer for a CREATE of `document`; a kind KGWE does
    not admit passes unchanged (the webhook configurations do not even send it), so every document of a file
    gets an answer."""
    kinds = WORKLOAD_READS.value.kind_table(admission.seams)
    try:
        group_version_resource(document, kinds)
    except ValueError as exc:
        return ReviewResult(True, "", [], document, [f"{exc}: the API server does not send it to KGWE"], {})
    return review_pod(admission, document, user, groups, deadline_seconds, kinds)


def _message(response: dict[str, Any]) -> str:
    return str((response.get("status") or {}).get("message", ""))


def render_text(result: ReviewResult) -> str:
    """The readable form of a review."""
    view = ObjectView(result.object)
    name = view.name or view.generate_name or "<unnamed>"
    verdict = "ALLOWED" if result.allowed else "DENIED"
    kind = (view.kind or "Pod").lower()
    lines = [f"{kind} {view.namespace or 'default'}/{name}: {verdict}"]
    if result.message:
        lines.append(f"  reason: {result.message}")
    if result.quota:
        lines.append(f"quota: {result.quota}")
    if result.patch:
        lines.append(f"patch ({len(result.patch)} operation{'s' if len(result.patch) != 1 else ''}):")
        for op in result.patch:
            value = f" {orjson.dumps(op['value']).decode()}" if "value" in op else ""
            source = f" from {op['from']}" if "from" in op else ""
            lines.append(f"  {op['op']} {op['path']}{source}{value}")
    else:
        lines.append(f"patch: none (the {kind} is admitted unchanged)")
    if result.warnings:
        lines.append("warnings:")
        lines.extend(f"  - {w}" for w in result.warnings)
    if result.audit_annotations:
        lines.append("audit annotations:")
        lines.extend(f"  {k}: {v}" for k, v in sorted(result.audit_annotations.items()))
    for template in result.creates:
        created = ObjectView(template)
        lines.append(f"creates {created.kind} {created.namespace}/{created.name}:")
        lines.append(f"  {orjson.dumps(template.get('spec')).decode()}")
    return "\n".join(lines)
