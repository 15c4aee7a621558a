"""Placement plans remembered per cluster snapshot, for pods that plan alike: the replicas of one workload.

A ReplicaSet, Job or StatefulSet creates pods that differ only in their identity (name, uid, creation
time); both webhooks see each of them, and planning is the largest part of admission that is not a
policy. `build_plan` is a pure function of the pod, its intent and GPU demand, the policy decision, the
cluster snapshot and the configuration, and it reads nothing of a pod's identity. So admission plans
the pod *without* its identity fields (`planning_pod`), and remembers the plan under everything it was
computed from:

- the snapshot: the memo lives in `ClusterModel.derived`, and dies with the snapshot;
- the configuration: the object itself (a new configuration is a new object), compared by identity;
- the pod without its identity, as its exact JSON bytes (two different pods never share a key; pods
  over `MAX_KEY_BYTES` are planned every time); the entry keeps its own copy of that pod, read back
  from those bytes, and only a pod those bytes give back exactly is remembered. Bytes say exactly what
  a JSON document is, and admission's pods are JSON documents (decoded from the API server's body, or
  copied through JSON from a workload's template); a pod built in Python with a tuple where JSON has a
  list would share its list twin's key, so the memo is for admission (`FactGathering.gather`) only;
- the intent, the GPU demand and the decision, as exact values.

A key seen once is only marked (most pods are not replicas: remembering costs more than planning once);
the second pod with it is planned without its identity and remembered, and the pods after it get a copy
of that plan. Planning the pod without its identity makes the key complete by construction: a plan can
only depend on what the key holds. Plans are mutable, so every caller gets its own copy (`copy_plan`); the memo's
own plan is never handed out. Bounded: past `PLAN_MEMO_SIZE` plans the memo starts again.

The pod's intent and GPU demand are read the same way (`read_pod`): both are pure functions of the pod that
read its annotations and spec, never its identity, so a replica gets a copy of what was read from the key's
own pod, under the same bytes the plan's key starts with (computed once per request and handed on).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

import orjson

from policies.gpu_demand import GpuDemand, pod_gpu_demand
from policies.vocabulary.identity import without_identity
from policies.vocabulary.objects import PodView
from webhook.cluster.model import ClusterModel
from webhook.config import Config
from webhook.intent import PodIntent, parse_intent
from webhook.placement.context import Decision, PlacementPlan
from webhook.placement.plan import build_plan

PLAN_MEMO_SIZE = 256
MAX_KEY_BYTES = 32 * 1024  # with PLAN_MEMO_SIZE: at most 8 MiB of keys per snapshot
_MEMO = "placement.memo"
_READINGS = "placement.readings"
_UNSEEN: Any = object()


def planning_pod(view: PodView) -> PodView:
    """The pod without its identity fields (a shallow copy: every other part is the pod's own object)."""
    stripped = without_identity(view.raw)
    return view if stripped is view.raw else PodView(stripped)


@dataclass(slots=True)
class PlanMemoEntry:
    """One remembered plan: the configuration it was made under, the plan (never handed out), the pod it
    was planned from (without its identity), and what else admission derived from that same pod and plan
    alone (`derived`, by name), so that replicas skip that too."""

    config: Config
    plan: PlacementPlan
    pod: PodView
    derived: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class PodReading:
    """What admission reads of a pod alone, once per request: the pod without its identity, its exact JSON
    (None when it has none or is over `MAX_KEY_BYTES`: then nothing is remembered), its intent and GPU demand."""

    pod: PodView
    body: bytes | None
    intent: PodIntent
    demand: GpuDemand


def read_pod(view: PodView, model: ClusterModel) -> PodReading:
    """`parse_intent(view)` and `pod_gpu_demand(view)`, remembered for this snapshot's replicas as plans are:
    a key seen once is only marked, the second pod with it is read from the key's own pod (its bytes read
    back, and only when they give the pod back exactly), and later ones get copies of that reading."""
    pod = planning_pod(view)
    body = _pod_bytes(pod)
    if body is None:
        return PodReading(pod, None, parse_intent(view), pod_gpu_demand(view))
    memo: dict[bytes, tuple[PodIntent, GpuDemand] | None] = model.derived.setdefault(_READINGS, {})
    found = memo.get(body, _UNSEEN)
    if found is not None and found is not _UNSEEN:
        return PodReading(pod, body, copy_intent(found[0]), copy_demand(found[1]))
    if found is _UNSEEN:
        if len(memo) >= PLAN_MEMO_SIZE:
            memo.clear()
        memo[body] = None  # seen once
        return PodReading(pod, body, parse_intent(view), pod_gpu_demand(view))
    own = orjson.loads(body)
    if own != pod.raw:
        return PodReading(pod, body, parse_intent(view), pod_gpu_demand(view))  # not a JSON document
    own_view = PodView(own)
    intent, demand = memo[body] = (parse_intent(own_view), pod_gpu_demand(own_view))
    return PodReading(pod, body, copy_intent(intent), copy_demand(demand))


def planned(
    view: PodView, intent: PodIntent, decision: Decision | None, model: ClusterModel, config: Config, demand: GpuDemand
) -> PlacementPlan:
    """`build_plan(view, intent, decision, model, config, demand)`, the same plan, remembered for this
    snapshot and configuration (see the module's docstring); `intent` and `demand` are the pod's."""
    return planned_with_entry(view, intent, decision, model, config, demand)[0]


def planned_with_entry(
    view: PodView, intent: PodIntent, decision: Decision | None, model: ClusterModel, config: Config, demand: GpuDemand,
    reading: PodReading | None = None,
) -> tuple[PlacementPlan, PlanMemoEntry | None]:
    """`planned`, and the memo entry the plan came from (None when the plan was not remembered).

    A pod seen for the first time in this snapshot is planned as it is, and only its key is kept: most
    pods are not replicas, and remembering costs more than planning once. The second pod with that key
    is planned without its identity and remembered; from the third on, the plan is a copy. `reading`, when
    given, is `read_pod(view, ...)`: its pod and bytes are not worked out again."""
    if reading is None:
        pod = planning_pod(view)
        body = _pod_bytes(pod)
    else:
        pod, body = reading.pod, reading.body
    key = _key(body, intent, decision, demand)
    if key is None:
        return build_plan(view, intent, decision, model, config, demand), None
    memo: dict[PlanKey, PlanMemoEntry | None] = model.derived.setdefault(_MEMO, {})
    found = memo.get(key, _UNSEEN)
    if isinstance(found, PlanMemoEntry) and found.config is config:
        return copy_plan(found.plan), found
    if len(memo) >= PLAN_MEMO_SIZE:
        memo.clear()
    if found is _UNSEEN:
        memo[key] = None  # seen once
        return build_plan(view, intent, decision, model, config, demand), None
    plan = build_plan(pod, intent, decision, model, config, demand)
    own_pod = orjson.loads(key[0])
    if own_pod != pod.raw:
        return plan, None  # not a JSON document (a tuple for a list, say): its bytes do not say what it is
    # The entry holds its own copies: the request's objects (and the plan given out) may change later.
    entry = memo[key] = PlanMemoEntry(config, copy_plan(plan), PodView(own_pod))
    return plan, entry


PlanKey = tuple[bytes, bytes | None, tuple[Any, ...], tuple[Any, ...]]


def _pod_bytes(pod: PodView) -> bytes | None:
    """The exact JSON of the pod without its identity; None when it cannot be written exactly (a value JSON
    cannot hold) or is too large to keep."""
    try:
        body = orjson.dumps(pod.raw)
    except TypeError:
        return None
    return body if len(body) <= MAX_KEY_BYTES else None


def _key(body: bytes | None, intent: PodIntent, decision: Decision | None, demand: GpuDemand) -> PlanKey | None:
    """Everything the plan is computed from besides the snapshot and configuration (`body`: `_pod_bytes` of the
    pod); None when it cannot be written exactly or is too large to keep."""
    if body is None:
        return None
    try:
        decided = orjson.dumps([decision.fields, decision.decided_by]) if decision is not None else None
    except TypeError:
        return None
    if decided is not None and len(decided) > MAX_KEY_BYTES:
        return None
    return (body, decided, _intent_key(intent), _demand_key(demand))


def _intent_key(intent: PodIntent) -> tuple[Any, ...]:
    return (
        tuple(intent.accelerator_types), intent.profile, _exact(intent.gpu_memory_bytes), intent.sharing,
        _exact(intent.gpu_fraction), intent.topology, intent.gang, intent.gang_size, tuple(intent.problems),
        tuple(intent.warnings),
    )


def _demand_key(demand: GpuDemand) -> tuple[Any, ...]:
    return (
        demand.whole_gpus, tuple(demand.mig.items()), tuple((k, _exact(v)) for k, v in demand.other.items()),
        tuple(demand.invalid), tuple(demand.gpu_containers),
    )


def _exact(value: Any) -> Any:
    # Decimals equal in value may differ in how they print (10 and 1E+1): keep the exact text too.
    return None if value is None else (type(value).__name__, str(value))


def copy_plan(plan: PlacementPlan) -> PlacementPlan:
    """A plan equal to `plan` that shares nothing a caller could change with it (Decimals, strings and the
    frozen requirements and trace steps are immutable and shared).

    Field by field in the class's order on a bare object (no `__init__`: no 33 keyword arguments, no defaults to
    build), a copy of each that holds a list or a dict: the copy keeps its attributes inline, where a `__dict__`
    handed to it makes every later read about twice as slow on Python 3.11. A field added to `PlacementPlan` must be
    added here (tests/placement/test_plan_memo.py fails until it is)."""
    fresh: PlacementPlan = _new(PlacementPlan)
    fresh.gpu_pod = plan.gpu_pod
    fresh.types = list(plan.types)
    fresh.sharing = plan.sharing
    fresh.mig_profile = plan.mig_profile
    fresh.mig_strategy = plan.mig_strategy
    fresh.gpu_fraction = plan.gpu_fraction
    fresh.gpu_memory_bytes = plan.gpu_memory_bytes
    fresh.nvlink = plan.nvlink
    fresh.gang = plan.gang
    fresh.profile = plan.profile
    fresh.requirements = list(plan.requirements)
    fresh.type_alternatives = [list(alternative) for alternative in plan.type_alternatives]
    fresh.preferences = list(plan.preferences)
    fresh.tolerations = _json_copy(plan.tolerations) if plan.tolerations else []
    fresh.resource_renames = dict(plan.resource_renames)
    fresh.env = dict(plan.env)
    fresh.labels = dict(plan.labels)
    fresh.annotations = dict(plan.annotations)
    fresh.pod_affinity_terms = _json_copy(plan.pod_affinity_terms) if plan.pod_affinity_terms else []
    fresh.scheduling_gates = list(plan.scheduling_gates)
    fresh.scheduling_group = plan.scheduling_group
    fresh.gpu_equivalents = plan.gpu_equivalents
    fresh.price_per_gpu_hour = plan.price_per_gpu_hour
    fresh.charge_type = plan.charge_type
    fresh.refusals = list(plan.refusals)
    fresh.warnings = list(plan.warnings)
    fresh.decided_by = dict(plan.decided_by)
    fresh.steps = list(plan.steps)
    fresh.notes = list(plan.notes)
    fresh.backend = plan.backend
    fresh.mig_choices = list(plan.mig_choices)
    fresh.dra = copy.deepcopy(plan.dra) if plan.dra is not None else None
    fresh.trace = list(plan.trace)
    return fresh


_new = object.__new__


def copy_intent(intent: PodIntent) -> PodIntent:
    """An intent equal to `intent` sharing no list with it (its other fields are immutable)."""
    return PodIntent(
        accelerator_types=list(intent.accelerator_types), profile=intent.profile,
        gpu_memory_bytes=intent.gpu_memory_bytes, sharing=intent.sharing, gpu_fraction=intent.gpu_fraction,
        topology=intent.topology, gang=intent.gang, gang_size=intent.gang_size, problems=list(intent.problems),
        warnings=list(intent.warnings), out_of_bounds=list(intent.out_of_bounds),
    )


def copy_demand(demand: GpuDemand) -> GpuDemand:
    """A GPU demand equal to `demand` sharing no list or dict with it (amounts are immutable)."""
    return GpuDemand(demand.whole_gpus, dict(demand.mig), dict(demand.other), list(demand.invalid),
                     list(demand.gpu_containers))


def _json_copy(value: Any) -> Any:
    """A deep copy of JSON-shaped data (dicts, lists, tuples of scalars), types kept as they are."""
    if isinstance(value, dict):
        return {k: v if type(v) in _SCALARS else _json_copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [v if type(v) in _SCALARS else _json_copy(v) for v in value]
    if isinstance(value, tuple):
        return tuple(_json_copy(v) for v in value)
    return value


# Values `_json_copy` hands back as they are, tested by exact type before any call: a plan's tolerations and
# affinity terms are dicts of strings and numbers, so most of their values need no call (a subclass of one of these,
# or anything else, still goes through `_json_copy`'s own tests).
_SCALARS = frozenset({str, int, float, bool, type(None)})
