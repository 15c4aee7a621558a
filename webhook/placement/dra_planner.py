"""What the placement steps ask of the DRA wing on DRA nodes: the backend step which backend renders the
pod, the MIG step the slices, the MPS step a share of a GPU. Filled by the assembly with the DRA wing's
planner (webhook/dra/plan.py, which also registers the `dra-claims` step that renders the claims)."""

from __future__ import annotations

from typing import Protocol

from policies.gpu_demand import GpuDemand
from policies.vocabulary.objects import PodView
from webhook.cluster.model import ClusterModel
from webhook.config import Config
from webhook.intent import PodIntent
from webhook.ordered_seam import SeamSlot
from webhook.placement.context import PlacementPlan, PlanContext


class DraPlanner(Protocol):
    def choose_backend(
        self, plan: PlacementPlan, candidates: list[str], model: ClusterModel, config: Config
    ) -> list[str]: ...

    def plan_dra_mig(
        self,
        plan: PlacementPlan,
        pod: PodView,
        demand: GpuDemand,
        candidates: list[str],
        wanted_profile: str | None,
        intent: PodIntent,
        model: ClusterModel,
    ) -> bool: ...

    def plan_dra_share(self, ctx: PlanContext) -> bool: ...


DRA_PLANNER: SeamSlot[DraPlanner] = SeamSlot("the placement's DRA planner")
