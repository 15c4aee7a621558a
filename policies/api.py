"""The policy layer's public surface: what the webhook hands in and what it gets back.

Everything here is plain data; the runtime (`policies.runtime`) does the work.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

EnforcementAction = Literal["Deny", "Warn", "Audit"]
ENFORCEMENT_ACTIONS: tuple[EnforcementAction, ...] = ("Deny", "Warn", "Audit")

# Top-level fields a placement decision may set, in the order they are reported.
DECISION_FIELDS = ("acceleratorTypes", "sharing", "topology", "gang")


class WouldBlock(Exception):
    """Raised by a check asked not to wait (`wait=False`) when its answer needs a lock, a file or the
    network: the caller asks again where waiting is allowed (off the event loop). Nothing was changed.

    `soon` is True when what was in the way is a local lock held for microseconds (another worker's
    quota transaction): asking again without waiting a moment later usually succeeds, which is cheaper
    than handing the check to a thread that must win the GIL back from a busy event loop."""

    def __init__(self, message: str, *, soon: bool = False) -> None:
        super().__init__(message)
        self.soon = soon


@dataclass(frozen=True)
class PolicyContext:
    """One admission request as the policies see it."""

    request: dict[str, Any]  # AdmissionReview `request`, with "object" = the pod judged
    namespace_object: dict[str, Any] | None  # CEL `namespaceObject`; Rego `input.namespaceObject`
    cluster: dict[str, Any]  # cluster summary, Rego `data.kgwe.cluster`
    intent: dict[str, Any] = field(default_factory=dict)  # user intent parsed from annotations
    tenant: str | None = None
    # The pod's workload's GPU usage (docs/policies.md "Usage"): Rego `input.kgwe.usage`, CEL `usage`;
    # None when KGWE has no usage for it.
    usage: dict[str, Any] | None = None


@dataclass
class PlacementDecision:
    """The merged decision document of every placement policy that spoke."""

    fields: dict[str, Any] = field(default_factory=dict)
    decided_by: dict[str, str] = field(default_factory=dict)  # top-level field -> policy name


@dataclass(frozen=True)
class Violation:
    policy: str
    action: EnforcementAction
    message: str
    # The policy could not be evaluated for this request (its engine failed on it, or it ran past its time
    # limit): `action` is what policies.failureMode makes of that, and /validate refuses a GPU pod either way.
    failed: bool = False


@dataclass(frozen=True)
class PolicyStatus:
    """What a GPUPolicy's status condition needs: did the last load of this policy succeed."""

    name: str
    source: str  # "builtin", a file path, or "GPUPolicy/<name>"
    loaded: bool  # a version of this policy is serving
    error: str | None = None  # the last load error, also when an older version keeps serving
    kind: str = "rego"  # "rego" module or "GPUPolicy"


@dataclass
class ReloadReport:
    loaded: list[str] = field(default_factory=list)
    errors: dict[str, str] = field(default_factory=dict)  # policy name -> why it was refused
    kept_previous: list[str] = field(default_factory=list)  # refused, last good version still serving

    @property
    def ok(self) -> bool:
        return not self.errors
