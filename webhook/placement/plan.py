"""From a pod's intent (and the policies' decision) to a placement plan, against the cluster model.

A pure function: the pod, its intent, the policy decision and the model in, a `PlacementPlan` out
(requirements, preferences, tolerations, resource renames, env, labels, cost, refusals). It reads only
the per-type indexes of the model, so its cost does not grow with the number of nodes. The mutation
steps render the plan; `/validate` refuses the plan's refusals. The plan is computed from whatever pod
arrives, and a pod that already carries an earlier pass's output yields the same plan (idempotence).

Planning is the ordered pipeline `PLAN_STEPS`: small named steps over one `PlanContext`
(webhook/placement/context.py), each in the module whose name says what it decides. A step that
returns False ends planning (a refusal, usually); the plan is whatever the steps wrote by then. The core
names every step in order; the wings' steps (`gang`: webhook/gangs/plan.py, `dra-claims`:
webhook/dra/plan.py) are registered at their names by the assembly (webhook/ordered_seam.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from policies.gpu_demand import GpuDemand, pod_gpu_demand
from policies.vocabulary.objects import PodView, pod_view
from webhook.cluster.model import ClusterModel
from webhook.config import Config
from webhook.intent import PodIntent
from webhook.ordered_seam import OrderedSeam
from webhook.placement import (
    asked,
    candidates,
    capacity,
    costing,
    mig,
    nvlink,
    profile_resources,
    selection,
    sharing,
)
from webhook.placement.context import Decision, PlacementPlan, PlanContext, PlanStep, describe_cluster

__all__ = [
    "PLAN_STEPS",
    "Decision",
    "PlacementPlan",
    "PlanContext",
    "PlanStep",
    "build_plan",
    "describe_cluster",
]

# The planning pipeline, in order. Names are stable (tests and docs use them); a step acts only when
# the pod asks for what it decides and otherwise passes the context on unchanged. A name without a step
# here is a wing's, registered by the assembly.
_ORDER: tuple[tuple[str, PlanStep | None], ...] = (
    ("profile", asked.resolve_profile),  # the named HardwareProfile exists
    ("profile-resources", profile_resources.within_bounds),  # the profile's min..max per resource
    ("asked-types", asked.asked_types),  # types from intent, profile, policy decision
    ("asked-sharing", asked.asked_sharing),  # sharing, MIG profile, fraction, topology, gang
    ("hami", asked.hami_defers),  # HAMi pods: sharing left to HAMi
    ("cluster-types", candidates.cluster_types),  # types asked for that the cluster has (or every type)
    ("vendor", candidates.vendor),  # the vendor of the pod's GPU resources
    ("backend", candidates.backend),  # device plugin or DRA, one per pod
    ("gpu-memory", candidates.gpu_memory),  # memory per GPU
    ("mig", mig.mig),  # MIG profile and strategy
    ("mps", sharing.mps),  # MPS nodes, thread and memory limits
    ("time-slicing", sharing.time_slicing),  # time-sliced nodes
    ("exclusive", sharing.exclusive),  # unshared nodes
    ("gpus-per-node", capacity.gpus_per_node),  # a node with every whole GPU of the pod
    ("nvlink", nvlink.nvlink),  # every GPU in one NVLink domain
    ("gang", None),  # a clique or room for the gang (webhook/gangs/plan.py)
    ("type-selectors", selection.type_selectors),  # node labels selecting the types, preferences
    ("tolerations", selection.tolerations),  # GPU taints, the profile's tolerations
    ("profile-node-selector", selection.profile_node_selector),  # the profile's extra node labels
    ("merge-requirements", selection.merged_requirements),  # one consistent set, contradictions refused
    ("dra-claims", None),  # DRA claims and templates (webhook/dra/plan.py)
    ("cost", costing.cost),  # GPU-equivalents, charge type, price
)
PLAN_STEPS: OrderedSeam[PlanStep] = OrderedSeam(
    "placement steps", [name for name, _step in _ORDER], {name: step for name, step in _ORDER if step is not None}
)


def build_plan(
    pod: PodView | Mapping[str, Any],
    intent: PodIntent,
    decision: Decision | None,
    model: ClusterModel,
    config: Config,
    demand: GpuDemand | None = None,
) -> PlacementPlan:
    """The placement plan of `pod` (its view, as admission passes the one built at decode, or the pod's
    dict). `demand` is the pod's GPU demand when the caller has it already (it is derived from `pod`).
    A pod that asks for no GPU and has no intent gets an empty plan. The pod is only read."""
    view = pod_view(pod)
    demand = demand if demand is not None else pod_gpu_demand(view)
    plan = PlacementPlan(gpu_pod=demand.asks_gpu or not intent.empty)
    if not plan.gpu_pod:
        return plan
    fields = dict(decision.fields) if decision else {}
    if decision:
        plan.decided_by = {k: v for k, v in decision.decided_by.items() if k in fields}
    context = PlanContext(view, intent, model, config, demand, plan, fields)
    for _name, step in PLAN_STEPS.steps:
        if not step(context):
            break
    return plan
