"""The result of one admission decision, before it is rendered as an AdmissionReview response."""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from typing import Any

import orjson


@dataclass
class Outcome:
    allowed: bool = True
    code: int = 200
    message: str = ""
    reason: str = ""
    patch: list[dict[str, Any]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    audit_annotations: dict[str, str] = field(default_factory=dict)
    # The object after the patch (for `kgwe review` and for validating the mutated pod).
    object: dict[str, Any] | None = None
    # Objects the webhook creates (or, offline and on dry runs, would create) for this pod: DRA
    # ResourceClaimTemplates. Not part of the AdmissionResponse; `kgwe review` shows them.
    creates: list[dict[str, Any]] = field(default_factory=list)
    # The placement plan behind a /mutate answer, for its Event (webhook/server/pod_events.py); never rendered.
    plan: Any = field(default=None, compare=False, repr=False)

    def encoded_patch(self) -> str:
        """The patch as an AdmissionResponse carries it, its JSON in base64; "" when there is none."""
        return base64.b64encode(orjson.dumps(self.patch)).decode("ascii") if self.patch else ""

    @classmethod
    def deny(cls, message: str, code: int = 403, reason: str = "Forbidden", *, warnings: list[str] | None = None,
             audit_annotations: dict[str, str] | None = None, object: dict[str, Any] | None = None) -> Outcome:
        """A refusal; `warnings`, `audit_annotations` and `object`, when given, are its own (not copied)."""
        return cls(allowed=False, code=code, message=message, reason=reason,
                   warnings=warnings if warnings is not None else [],
                   audit_annotations=audit_annotations if audit_annotations is not None else {}, object=object)
