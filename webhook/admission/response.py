"""Render an admission `Outcome` as the AdmissionReview the API server accepts.

One pure function, in the manner of kopf's `build_response`: the HTTP shell and `kgwe review` both
go through it, so the rules the API server enforces on responses live in exactly one place:
- `uid`, `apiVersion` and `kind` are echoed; a mismatch is an "invalid webhook response".
- A patch only from the mutating endpoint, only when non-empty, base64 with `patchType: JSONPatch`;
  a validating webhook that returns a patch is treated as a failed call.
- Denials carry `status.code` >= 400 (the API server would force it anyway) and a message.
- Warnings: <= 120 characters each is the guidance, total <= 4096; the API server dedupes and
  truncates beyond that, re-emitting earlier warnings truncated, so we do it first and predictably.
- auditAnnotations keys end up as `<webhook-name>/<key>`: the key must be a qualified-name part
  (no `/`, <= 63 characters, alphanumerics and `-_.` inside); invalid keys are dropped by the API
  server with only a log line, so we repair them here or drop them loudly.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping
from typing import Any

from webhook.admission.outcome import Outcome
from webhook.admission.request import API_VERSION, KIND

log = logging.getLogger(__name__)

WARNING_MAX_CHARS = 120
WARNINGS_MAX_TOTAL_CHARS = 4096
ELLIPSIS = "…"
AUDIT_KEY_MAX_CHARS = 63

_AUDIT_KEY = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_AUDIT_KEY_BAD_CHARS = re.compile(r"[^-A-Za-z0-9_.]+")
_CONTROL_CHARS = re.compile(r"[\x00-\x1f\x7f]+")

STATUS_REASONS = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    409: "Conflict",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}


def render_review(request_uid: str, api_version: str, outcome: Outcome, mutating: bool) -> dict[str, Any]:
    """The AdmissionReview answering request `request_uid` with `outcome`."""
    response: dict[str, Any] = {"uid": request_uid, "allowed": bool(outcome.allowed)}
    if not outcome.allowed:
        response["status"] = _status(outcome)
    elif mutating and (encoded := outcome.encoded_patch()):
        response["patchType"] = "JSONPatch"
        response["patch"] = encoded
    warnings = _sanitized(outcome.warnings) if outcome.warnings else []
    if warnings:
        response["warnings"] = warnings
    annotations = sanitize_audit_annotations(outcome.audit_annotations) if outcome.audit_annotations else {}
    if annotations:
        response["auditAnnotations"] = annotations
    return {"apiVersion": api_version or API_VERSION, "kind": KIND, "response": response}


def _status(outcome: Outcome) -> dict[str, Any]:
    code = outcome.code if outcome.code >= 400 else 403
    message = outcome.message or outcome.reason or "denied by KGWE"
    reason = outcome.reason or STATUS_REASONS.get(code, "Forbidden")
    return {"code": code, "message": message, "reason": reason}


def _shorten(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - len(ELLIPSIS)].rstrip() + ELLIPSIS


def _clean(warning: object) -> bool:
    """Whether cleaning would give `warning` back as it is: a string of at most WARNING_MAX_CHARS printable
    characters (no control character, and no whitespace but the ASCII space) with no space at either end and
    no two in a row (most warnings: they are KGWE's own sentences)."""
    return (
        type(warning) is str
        and len(warning) <= WARNING_MAX_CHARS
        and warning.isprintable()
        and "  " not in warning
        and warning[:1] != " "
        and warning[-1:] != " "
    )


_SANITIZED: dict[tuple[str, ...], tuple[str, ...]] = {}
_SANITIZED_SIZE = 256


def _sanitized(warnings: list[str]) -> list[str]:
    """`sanitize_warnings(warnings)`, remembered for the lists of strings seen last (a workload's replicas get the
    same warnings): a pure function of them. Only lists short enough that nothing is left out are remembered
    (cleaning never lengthens a warning), so every list left short is still logged."""
    key = tuple(warnings)
    found = _SANITIZED.get(key)
    if found is None:
        if not all(type(w) is str for w in key) or sum(map(len, key)) > WARNINGS_MAX_TOTAL_CHARS:
            return sanitize_warnings(warnings)
        if len(_SANITIZED) >= _SANITIZED_SIZE:
            _SANITIZED.clear()
        found = _SANITIZED[key] = tuple(sanitize_warnings(key))
    return list(found)


def sanitize_warnings(warnings: Iterable[str]) -> list[str]:
    """Single-line, <= 120 characters each, no duplicates, <= 4096 characters in all.

    When the total would overflow, the warnings that fit are kept and the last one says how many
    were left out, so a user still learns that there was more.
    """
    cleaned: list[str] = []
    seen: set[str] = set()
    for warning in warnings:
        text = warning if _clean(warning) else _shorten(
            " ".join(_CONTROL_CHARS.sub(" ", str(warning)).split()), WARNING_MAX_CHARS)
        if text and text not in seen:
            seen.add(text)
            cleaned.append(text)
    kept: list[str] = []
    total = 0
    for index, text in enumerate(cleaned):
        if total + len(text) > WARNINGS_MAX_TOTAL_CHARS:
            omitted = len(cleaned) - index
            note = f"{omitted} more warning(s) omitted"
            while kept and total + len(note) > WARNINGS_MAX_TOTAL_CHARS:
                total -= len(kept.pop())
                omitted += 1
                note = f"{omitted} more warning(s) omitted"
            kept.append(note)
            log.warning("admission warnings over %d characters: %d left out", WARNINGS_MAX_TOTAL_CHARS, omitted)
            break
        kept.append(text)
        total += len(text)
    return kept


def repair_audit_key(key: str) -> str | None:
    """The key made into a valid qualified-name part, or None when nothing usable is left."""
    if len(key) <= AUDIT_KEY_MAX_CHARS and _AUDIT_KEY.match(key):
        return key
    repaired = _AUDIT_KEY_BAD_CHARS.sub("-", key)[:AUDIT_KEY_MAX_CHARS].strip("-_.")
    return repaired if repaired and _AUDIT_KEY.match(repaired) else None


_reported_keys: set[str] = set()


def _report_once(key: str, message: str, *args: object) -> None:
    # The same producer sends the same key on every request: one log line per key is enough.
    if key not in _reported_keys and len(_reported_keys) < 1000:
        _reported_keys.add(key)
        log.warning(message, *args)


def sanitize_audit_annotations(annotations: Mapping[str, Any]) -> dict[str, str]:
    result: dict[str, str] = {}
    for key, value in annotations.items():
        valid = repair_audit_key(str(key))
        if valid is None:
            _report_once(str(key), "audit annotation %r dropped: no valid key can be made from it", key)
            continue
        if valid in result:
            _report_once(str(key), "audit annotation %r dropped: its repaired key %r is already used", key, valid)
            continue
        if valid != key:
            _report_once(str(key), "audit annotation key %r repaired to %r", key, valid)
        result[valid] = value if isinstance(value, str) else str(value)
    return result
