"""The DRA wing's part of mutation: a pod placed on DRA nodes gets the claims its plan rendered instead of
its GPU resources (webhook/dra/render.py `apply_claims`), written by the `gpu-resources` mutator
(webhook/mutation/steps.py `GPU_RESOURCE_WRITERS`, registered by the assembly at `dra-claims`)."""

from __future__ import annotations

from typing import Any

from webhook.dra.render import apply_claims
from webhook.placement.context import PlacementPlan


def write_claims(pod: dict[str, Any], plan: PlacementPlan) -> None:
    if plan.dra is not None:
        apply_claims(pod, plan.dra)


# What the assembly registers in `webhook.mutation.steps.GPU_RESOURCE_WRITERS`.
GPU_RESOURCE_WRITERS = {"dra-claims": write_claims}
