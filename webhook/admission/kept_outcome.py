"""An `Outcome` whose patch and object stay JSON bytes until something reads them: `/mutate`'s answer remembered
for replicas (webhook/admission/mutate.py `RememberedAnswer`), handed to each replica.

A replica's answer is usually only rendered: the AdmissionResponse carries the patch's JSON in base64, which the
memo keeps, and nothing on the way reads the mutated pod (the gang hook does, for a gang's members). Decoding both
for every replica cost more than the rest of its answer after the facts. Each is decoded on its first read, into
the request's own lists and dicts (nothing shared with the memo or another request), and from then on the outcome
is an ordinary one: whatever would change the patch reads it first, or sets a new one, and from then on its
encoding is worked out from what it holds. So every reader sees what a decoded outcome would hold.
"""

from __future__ import annotations

import builtins
from dataclasses import fields
from typing import Any

import orjson

from webhook.admission.outcome import Outcome

_UNREAD: Any = object()


class KeptOutcome(Outcome):
    """An allowed outcome of `patch` and `pod` (JSON bytes) and `encoded` (the patch's JSON in base64, as
    `Outcome.encoded_patch` gives it), with `warnings` and `plan`; the other fields are `Outcome`'s defaults."""

    def __init__(self, patch: bytes, pod: bytes, encoded: str, warnings: list[str], plan: Any) -> None:
        super().__init__(warnings=warnings)
        self.plan = plan
        self._patch_json, self._pod_json, self._encoded = patch, pod, encoded
        self._patch: list[dict[str, Any]] = _UNREAD
        self._object: dict[str, Any] | None = _UNREAD

    @property  # type: ignore[override]
    def patch(self) -> list[dict[str, Any]]:
        if self._patch is _UNREAD:
            self._patch = orjson.loads(self._patch_json)
        return self._patch

    @patch.setter
    def patch(self, value: list[dict[str, Any]]) -> None:
        self._patch = value

    @property  # type: ignore[override]
    def object(self) -> dict[str, Any] | None:
        if self._object is _UNREAD:
            self._object = orjson.loads(self._pod_json)
        return self._object

    @object.setter
    def object(self, value: dict[str, Any] | None) -> None:
        self._object = value

    def encoded_patch(self) -> str:
        # Kept only while the patch was never read or set: a change to it goes through one of the two.
        return self._encoded if self._patch is _UNREAD else super().encoded_patch()

    def __eq__(self, other: builtins.object) -> bool:  # `object` here is the field
        # `Outcome`'s own __eq__ compares outcomes of one class only; this one equals a decoded twin.
        if not isinstance(other, Outcome):
            return NotImplemented
        return all(getattr(self, f.name) == getattr(other, f.name) for f in fields(Outcome) if f.compare)

    __hash__ = None  # type: ignore[assignment]  # mutable, as `Outcome`
