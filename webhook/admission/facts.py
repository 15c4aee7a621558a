"""What admission knows about one pod request, gathered once: a leaf the gates and the core share.

`Facts` is built by `FactGathering.gather` in webhook/admission/gather.py (decode, cluster snapshot,
intent, tenant, policy decision, placement plan) and then only read: by the mutation steps, the
validation checks and the I/O gates (RBAC, quota). It imports nothing of the admission core, so the
gate ports can name it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar, overload

from policies.api import Violation
from policies.gpu_demand import GpuDemand
from webhook.admission.request import AdmissionRequest
from webhook.admission.tenancy import Tenancy
from webhook.cluster.model import ClusterModel
from webhook.intent import PodIntent
from webhook.placement.constraints import conflicts_with_pod
from webhook.placement.memo import PlanMemoEntry
from webhook.placement.plan import Decision, PlacementPlan

Problem = tuple[str, str]  # (reason, message)
_T = TypeVar("_T")


class _once(Generic[_T]):  # lower case: a decorator, as cached_property is
    """`functools.cached_property` without its lock: Python 3.11's takes one on every first read, and a `Facts`
    belongs to one request on one thread. The value is put in the instance's `__dict__`, which later reads find
    first (this is a non-data descriptor)."""

    def __init__(self, function: Callable[[Any], _T]) -> None:
        self.function = function
        self.name = function.__name__
        self.__doc__ = function.__doc__

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, instance: None, owner: type | None = None) -> _once[_T]: ...

    @overload
    def __get__(self, instance: object, owner: type | None = None) -> _T: ...

    def __get__(self, instance: object | None, owner: type | None = None) -> _T | _once[_T]:
        if instance is None:
            return self
        value = instance.__dict__[self.name] = self.function(instance)
        return value


class UsageRow(Protocol):
    """A workload's row of the usage table (webhook/usage/table.py `WorkloadUsage`), as admission reads it:
    the usage wing fills it through the `UsageGate` port, so the core names no type of it."""

    workload: str
    peak_memory_mib: int | None

    @property
    def recommendation(self) -> Any: ...

    def policy_document(self) -> dict[str, Any]: ...


@dataclass
class Facts:
    """Everything admission knows about one pod request, gathered once."""

    request: AdmissionRequest
    pod: dict[str, Any]
    model: ClusterModel
    intent: PodIntent
    tenant: str
    namespace_object: dict[str, Any] | None
    plan: PlacementPlan
    decision: Decision | None
    demand: GpuDemand
    violations: list[Violation] = field(default_factory=list)
    # Where the plan was remembered for replicas (webhook/placement/memo.py): what else depends only on the
    # pod without its identity, the plan, the snapshot and the configuration may be remembered there.
    plan_memo: PlanMemoEntry | None = None
    # The pod's workload in the usage table (webhook/usage/table.py); None without a table or a row.
    usage: UsageRow | None = None
    # Whether the pod asks GPUs past its resources (the gates' `asks_devices`: DRA claims of its own).
    device_asks: Callable[[Facts], bool] | None = None
    # The requester's tenancy in this snapshot, as gather found it for `tenant` (None: not found there): the
    # quota gate asks it again, three times on `/validate`.
    tenancy: Tenancy | None = None

    @_once
    def asks_own_devices(self) -> bool:
        return self.device_asks is not None and self.device_asks(self)

    @_once
    def conflicts(self) -> list[str]:
        """The user's own node constraints that contradict the plan (never overwritten: refused)."""
        pod = self.request.pod if self.pod is self.request.object else self.pod  # the view built at decode
        return conflicts_with_pod(pod, self.plan.requirements)

    @_once
    def renderable(self) -> bool:
        """Placement is written only for pods `/validate` would admit: bad input gets no half-mutation."""
        return (
            self.plan.gpu_pod
            and not self.plan.refusals
            and not self.intent.problems
            and not self.demand.invalid
            and not self.conflicts
        )

    @property
    def stale_nodes(self) -> int:
        return stale_nodes(self.plan, self.model)


def stale_nodes(plan: PlacementPlan, model: ClusterModel) -> int:
    """Nodes of the plan's types (the first 256 of each) whose topology labels are stale."""
    return sum(1 for t in plan.types for n in model.types[t].nodes[:256] if model.nodes[n].topology_stale)
