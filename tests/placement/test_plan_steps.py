"""Placement planning as a pipeline of named steps (webhook/placement/plan.py `PLAN_STEPS`).

The step names are stable, each decision lives in the module named after it (docs/architecture.md
points there), and a step that refuses ends planning: later steps write nothing.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from placement_support import load_pod

from policies.vocabulary.objects import PodView
from webhook.intent import parse_intent
from webhook.placement.plan import PLAN_STEPS, build_plan
from webhook.runtime import Runtime

# Where a reader is told to look for each decision (docs/architecture.md, "To change X, go to Y").
DECIDED_IN = {
    "asked-sharing": "webhook.placement.asked",
    "cluster-types": "webhook.placement.candidates",
    "mig": "webhook.placement.mig",
    "mps": "webhook.placement.sharing",
    "gpus-per-node": "webhook.placement.capacity",
    "nvlink": "webhook.placement.nvlink",
    "gang": "webhook.gangs.plan",
    "type-selectors": "webhook.placement.selection",
    "tolerations": "webhook.placement.selection",
    "dra-claims": "webhook.dra.plan",
    "cost": "webhook.placement.costing",
}


def test_step_names_are_unique_and_each_decision_lives_in_its_named_module() -> None:
    names = [name for name, _step in PLAN_STEPS.steps]
    assert len(names) == len(set(names))
    steps = dict(PLAN_STEPS.steps)
    for name, module in DECIDED_IN.items():
        assert steps[name].__module__ == module, name


def test_cost_is_the_last_step_so_it_prices_the_final_types() -> None:
    assert PLAN_STEPS.steps[-1][0] == "cost"
    names = [name for name, _step in PLAN_STEPS.steps]
    # Sharing and topology filters narrow before the types are turned into node selectors.
    assert names.index("nvlink") < names.index("gang") < names.index("type-selectors") < names.index("cost")


def _pod(annotations: dict[str, str], gpus: str = "1") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "default", "annotations": annotations},
        "spec": {"containers": [{"name": "c", "image": "cuda", "resources": {"limits": {"nvidia.com/gpu": gpus}}}]},
    }


def _plan(runtime: Runtime, pod: dict[str, Any]) -> Any:
    model = runtime.store.snapshot()
    return build_plan(pod, parse_intent(pod), None, model, runtime.config)


def test_a_refusing_step_ends_planning(runtime: Runtime) -> None:
    # 16 H100s on one node: refused by gpus-per-node; no selector, toleration or price is written after it.
    plan = _plan(runtime, _pod({"kgwe.io/accelerator": "nvidia-h100-80gb"}, gpus="16"))
    assert plan.refusals and "asks for 16 GPUs on one node" in plan.refusals[0]
    assert plan.trace[-1].step == "gpus per node"
    assert not plan.requirements and not plan.tolerations
    assert plan.charge_type is None and "cost" not in plan.steps


@pytest.mark.parametrize(
    ("name", "decided"),
    [
        ("05-mig-small.yaml", ["accelerator", "mig", "cost"]),
        ("07-mps.yaml", ["accelerator", "mps", "cost"]),
        ("08-nvlink.yaml", ["accelerator", "nvlink", "cost"]),
    ],
)
def test_the_decisions_recorded_follow_the_pipeline(runtime: Runtime, name: str, decided: list[str]) -> None:
    plan = _plan(runtime, load_pod(name))
    assert not plan.refusals
    assert [step for step in plan.steps if step in decided] == decided


@pytest.mark.parametrize("name", ["05-mig-small.yaml", "07-mps.yaml", "08-nvlink.yaml"])
def test_planning_from_the_request_view_equals_planning_from_the_dict_and_leaves_the_pod_alone(
    runtime: Runtime, name: str
) -> None:
    # Admission hands build_plan the view built at decode; tests and tools hand it the dict.
    pod = load_pod(name)
    before = copy.deepcopy(pod)
    model = runtime.store.snapshot()
    from_dict = build_plan(pod, parse_intent(pod), None, model, runtime.config)
    from_view = build_plan(PodView(pod), parse_intent(pod), None, model, runtime.config)
    assert from_view == from_dict
    assert pod == before
