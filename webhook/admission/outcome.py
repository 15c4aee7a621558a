"""The result of one admission decision, before it is rendered as an AdmissionReview response."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
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

    @classmethod
    def deny(cls, message: str, code: int = 403, reason: str = "Forbidden") -> Outcome:
        return cls(allowed=False, code=code, message=message, reason=reason)


class ObjectOnRead(Outcome):
    """An `Outcome` whose `object` is kept as its JSON bytes and decoded when first read: a remembered `/mutate`
    answer (webhook/admission/mutate.py `RememberedAnswer`), whose mutated pod most requests never read (the
    gang hook reads a gang member's). Assigning `object` replaces the bytes, as on any `Outcome`."""

    def __init__(self, *args: Any, pod: bytes | None = None, **fields: Any) -> None:
        super().__init__(*args, **fields)
        if pod is not None:
            self.__dict__["_pod"] = pod

    def __eq__(self, other: object) -> bool:
        # Equal to an `Outcome` of the same fields, as the dataclass compares two of one class.
        if not isinstance(other, Outcome):
            return NotImplemented
        return all(getattr(self, f.name) == getattr(other, f.name) for f in fields(Outcome) if f.compare)

    __hash__ = None  # type: ignore[assignment]  # as the dataclass's: mutable

    @property  # type: ignore[override]
    def object(self) -> dict[str, Any] | None:
        pod = self.__dict__.get("_pod")
        if pod is not None:
            self.__dict__["_object"], self.__dict__["_pod"] = orjson.loads(pod), None
        found: dict[str, Any] | None = self.__dict__.get("_object")
        return found

    @object.setter
    def object(self, value: dict[str, Any] | None) -> None:
        self.__dict__["_object"], self.__dict__["_pod"] = value, None
