"""The seams of the admission core: where a wing plugs in, filled by the assembly (webhook/assembly.py).

The core judges pods; everything else comes through four registries of `AdmissionSeams`:

- `kinds`: handlers of the kinds other than Pod (workloads, DRA claims), asked in order; the first that
  `judges` a request answers it, with the pod flow (`PodFlow`) at hand for the pods it is made of;
- `before`: hooks that rewrite a pod CREATE before it is judged (who asked for a controller's pod);
- `gates`: what `/validate` asks of a pod besides policies and placement (claims, RBAC, quota), and what
  they add at `/mutate` (a scheduling gate) or to the ownership check (a gang's PodGroup);
- `after`: hooks that see a pod's `/mutate` answer (gang warnings, DRA claim templates written).

A wing fills a seam with one file named for it (webhook/rbac/gate.py, webhook/workloads/kind.py, ...) and one
line in the assembly. The core imports no wing: it knows them only through these types.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from webhook.admission.facts import Facts, Problem
from webhook.admission.outcome import Outcome
from webhook.admission.request import AdmissionRequest


@dataclass
class Gate:
    """One check that may do I/O: `run(deadline)` returns its problems; it runs only while none exist."""

    name: str
    run: Callable[[float | None], list[Problem]]
    blocking: bool  # True when it may wait on the network: run off the event loop
    # The same check asked not to wait: its problems, or policies.api.WouldBlock when it would have to.
    # Tried on the event loop first: a cached review or a free lock then costs no thread hop.
    try_now: Callable[[float | None], list[Problem]] | None = None


@dataclass
class PendingVerdict:
    """A validation whose CPU-bound part is done; the I/O gates are still to run, in order."""

    request: AdmissionRequest
    problems: list[Problem]
    warnings: list[str]
    audit: dict[str, str]
    gates: list[Gate] = field(default_factory=list)


class AdmissionGate:
    """A wing's part in judging a pod. Every method has a default that does nothing, so a gate writes only
    what it adds; the core asks each registered gate in registration order."""

    # Asked again of a pod that `rightsizing.mode: auto` would rewrite: the rewrite is taken back when a gate
    # refuses it. False for a gate whose answer the rewrite cannot change.
    judges_rewrites = True

    def check(self, request: AdmissionRequest, facts: Facts) -> Gate | None:
        """The check `/validate` runs for this pod after placement (None: nothing to check)."""
        return None

    def advise(self, request: AdmissionRequest, facts: Facts) -> tuple[list[Problem], list[str]]:
        """Memory-only refusals and warnings of an admitted pod CREATE (not a workload's template), asked while
        nothing refuses it."""
        return [], []

    def scheduling_gates(self, request: AdmissionRequest, facts: Facts) -> list[str]:
        """The scheduling gates `/mutate` adds to this pod."""
        return []

    def output_problems(self, facts: Facts) -> list[Problem]:
        """Outputs on the pod that only KGWE may write and did not (ownership of `kgwe.io/` keys and the like)."""
        return []

    def fails_closed(self, request: AdmissionRequest) -> bool:
        """Whether an error judging this request must refuse it (it may ask something this gate guards)."""
        return False

    def asks_devices(self, facts: Facts) -> bool:
        """Whether the pod asks GPUs past its resources (DRA claims of its own): its tenant is recorded."""
        return False


class PodFlow(Protocol):
    """The pod admission of the core, for a kind handler judging the pods an object is made of."""

    def mutate_pod(self, request: AdmissionRequest, deadline: float | None = None) -> Outcome: ...

    def validate_pod(self, request: AdmissionRequest, deadline: float | None = None) -> Outcome: ...


class KindHandler(Protocol):
    """Admits a kind other than Pod (a workload of the kind table, a DRA claim)."""

    def judges(self, request: AdmissionRequest) -> bool:
        """Whether this handler answers the request (its kind, and the request valid enough to read)."""
        ...

    def mutate(self, request: AdmissionRequest, deadline: float | None, pods: PodFlow) -> Outcome: ...

    def prepare_verdict(
        self, request: AdmissionRequest, deadline: float | None, pods: PodFlow
    ) -> Outcome | PendingVerdict: ...


class RequestHook(Protocol):
    """Rewrites a pod request before either flow judges it."""

    def before(self, request: AdmissionRequest) -> AdmissionRequest: ...


class MutateHook(Protocol):
    """Sees the `/mutate` answer of a pod CREATE that KGWE placed (renderable facts)."""

    def after_mutate(
        self, request: AdmissionRequest, facts: Facts, outcome: Outcome, deadline: float | None
    ) -> Outcome: ...


@dataclass
class AdmissionSeams:
    """The registries the assembly fills (webhook/assembly.py `register_wings`)."""

    kinds: list[KindHandler] = field(default_factory=list)
    before: list[RequestHook] = field(default_factory=list)
    gates: list[AdmissionGate] = field(default_factory=list)
    after: list[MutateHook] = field(default_factory=list)

    def handler_of(self, request: AdmissionRequest) -> KindHandler | None:
        for handler in self.kinds:  # a loop, not `next()` over a generator: asked of every request
            if handler.judges(request):
                return handler
        return None

    def asks_devices(self, facts: Facts) -> bool:
        return any(gate.asks_devices(facts) for gate in self.gates)
