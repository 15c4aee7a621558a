"""The answer when admission cannot decide in time or fails: fail open or closed, as configured."""

from __future__ import annotations

from typing import Literal

from webhook.admission.outcome import Outcome

FailureKind = Literal["deadline", "internal"]

_CODES: dict[FailureKind, tuple[int, str]] = {
    "deadline": (504, "Timeout"),
    "internal": (500, "InternalError"),
}


def failure_outcome(kind: FailureKind, on_error: Literal["allow", "deny"], detail: str) -> Outcome:
    if on_error == "allow":
        return Outcome(
            allowed=True,
            warnings=[f"KGWE admitted this request unchanged: {detail}"],
            audit_annotations={"failed-open": kind},
        )
    code, reason = _CODES[kind]
    return Outcome.deny(f"KGWE could not decide on this request and fails closed: {detail}", code=code, reason=reason)
