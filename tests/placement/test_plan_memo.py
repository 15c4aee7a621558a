"""Plans remembered per snapshot (webhook/placement/memo.py) are the plans `build_plan` computes.

Differential: every example pod and hypothesis-generated pods (as users write them, and get wrong), with
and without a policy decision, in the example cluster and the DRA example cluster, planned fresh and
through the memo (first call and repeated), with their identity fields and without. Plans handed out
share nothing a caller can change, and a new configuration is planned anew.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from effort import tries
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from manifests import example_pods
from placement_support import EXAMPLES
from review_strategies import pods

from policies.gpu_demand import GpuDemand, pod_gpu_demand
from policies.vocabulary.identity import IDENTITY_FIELDS
from policies.vocabulary.objects import PodView
from webhook.assembly import build_runtime
from webhook.cluster.model import ClusterModel
from webhook.config import Config, load_config
from webhook.intent import PodIntent, parse_intent
from webhook.placement.memo import (
    copy_demand,
    copy_intent,
    copy_plan,
    planned,
    planned_with_entry,
    planning_pod,
    read_pod,
)
from webhook.placement.plan import Decision, PlacementPlan, build_plan

CONFIG = load_config(EXAMPLES / "config.yaml")
MODELS = {
    name: build_runtime(CONFIG, EXAMPLES / name, load_policies=False).store.snapshot()
    for name in ("cluster", "cluster-dra")
}
EXAMPLE_PODS = example_pods(EXAMPLES / "pods")
DECISIONS = [
    None,
    Decision({"acceleratorTypes": ["nvidia-a100-80gb", "nvidia-h100-80gb"]}, {"acceleratorTypes": "prefer-a100"}),
    Decision({"sharing": {"mode": "mig", "migProfile": "1g.10gb"}}, {"sharing": "small-to-mig"}),
    Decision({"topology": "nvlink", "gang": "g-1"}, {"topology": "p", "gang": "p"}),
]


def _fresh(pod: dict[str, Any], decision: Decision | None, model: ClusterModel, config: Config) -> PlacementPlan:
    view = PodView(pod)
    return build_plan(view, parse_intent(view), decision, model, config, pod_gpu_demand(view))


def _memo(pod: dict[str, Any], decision: Decision | None, model: ClusterModel, config: Config) -> PlacementPlan:
    view = PodView(pod)
    return planned(view, parse_intent(view), decision, model, config, pod_gpu_demand(view))


def _assert_same_plans(pod: dict[str, Any], decision: Decision | None, model: ClusterModel) -> None:
    expected = _fresh(pod, decision, model, CONFIG)
    assert build_plan(planning_pod(PodView(pod)), parse_intent(pod), decision, model, CONFIG) == expected
    # Seen once (planned as it is), remembered (planned without identity), then copies of the memo's plan.
    for _ in range(4):
        assert _memo(pod, decision, model, CONFIG) == expected


def _assert_same_readings(pod: dict[str, Any], model: ClusterModel) -> None:
    """`read_pod` seen once, remembered, then copies: each time the pod's own intent and GPU demand, and a plan
    planned from the reading is the one planned without it."""
    view = PodView(pod)
    intent, demand = parse_intent(view), pod_gpu_demand(view)
    for _ in range(4):
        reading = read_pod(view, model)
        assert (reading.intent, reading.demand) == (intent, demand)
        assert reading.pod.raw == planning_pod(view).raw
        with_reading = planned_with_entry(view, intent, None, model, CONFIG, demand, reading)[0]
        assert with_reading == _fresh(pod, None, model, CONFIG)


@pytest.mark.parametrize("model_name", sorted(MODELS))
@pytest.mark.parametrize("index", range(len(EXAMPLE_PODS)))
def test_every_example_pod_is_read_as_parse_intent_and_pod_gpu_demand_read_it(model_name: str, index: int) -> None:
    _assert_same_readings(EXAMPLE_PODS[index], MODELS[model_name])


@settings(max_examples=tries(40, 300), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pod=pods())
def test_generated_pods_are_read_as_parse_intent_and_pod_gpu_demand_read_them(pod: dict[str, Any]) -> None:
    _assert_same_readings(pod, MODELS["cluster"])


def test_a_reading_handed_out_shares_nothing_a_caller_can_change() -> None:
    model = build_runtime(CONFIG, EXAMPLES / "cluster", load_policies=False).store.snapshot()
    for pod in EXAMPLE_PODS:
        view = PodView(pod)
        expected = (parse_intent(view), pod_gpu_demand(view))
        read_pod(view, model)  # seen once
        read_pod(view, model)  # remembered
        given_out = read_pod(view, model)
        for part in (given_out.intent, given_out.demand):
            for value in vars(part).values():
                if isinstance(value, list | dict):
                    value.clear()
        again = read_pod(view, model)
        assert (again.intent, again.demand) == expected


def test_replicas_share_one_reading() -> None:
    model = build_runtime(CONFIG, EXAMPLES / "cluster", load_policies=False).store.snapshot()
    template = next(p for p in EXAMPLE_PODS if (p["metadata"].get("annotations") or {}).get("kgwe.io/accelerator"))
    for replica in range(4):
        pod = {**template, "metadata": {**template["metadata"], "name": f"web-{replica}", "uid": f"u-{replica}"}}
        reading = read_pod(PodView(pod), model)
        assert (reading.intent, reading.demand) == (parse_intent(template), pod_gpu_demand(template))
    assert len(model.derived["placement.readings"]) == 1


@pytest.mark.parametrize("model_name", sorted(MODELS))
@pytest.mark.parametrize("index", range(len(EXAMPLE_PODS)))
def test_every_example_pod_is_planned_as_build_plan_plans_it(model_name: str, index: int) -> None:
    for decision in DECISIONS:
        _assert_same_plans(EXAMPLE_PODS[index], decision, MODELS[model_name])


@settings(max_examples=tries(40, 300), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pod=pods(), decision=st.sampled_from(DECISIONS), model_name=st.sampled_from(sorted(MODELS)))
def test_generated_pods_are_planned_as_build_plan_plans_them(
    pod: dict[str, Any], decision: Decision | None, model_name: str
) -> None:
    _assert_same_plans(pod, decision, MODELS[model_name])


def test_replicas_share_one_entry_and_identity_fields_do_not_reach_the_plan() -> None:
    model = build_runtime(CONFIG, EXAMPLES / "cluster", load_policies=False).store.snapshot()
    template = next(p for p in EXAMPLE_PODS if (p["metadata"].get("annotations") or {}).get("kgwe.io/accelerator"))
    plans = []
    for replica in range(4):
        pod = {**template, "metadata": {**template["metadata"], "name": f"web-{replica}", "uid": f"u-{replica}",
                                        "generateName": "web-", "creationTimestamp": "2026-11-24T20:00:00Z"}}
        plans.append(_memo(pod, None, model, CONFIG))
        assert IDENTITY_FIELDS.isdisjoint(planning_pod(PodView(pod)).metadata)
        assert planning_pod(PodView(pod)).annotations == PodView(pod).annotations
    assert plans[0] == plans[1] == plans[2] == plans[3] == _fresh(template, None, model, CONFIG)
    assert len(model.derived["placement.memo"]) == 1


def test_a_plan_handed_out_shares_nothing_a_caller_can_change() -> None:
    model = build_runtime(CONFIG, EXAMPLES / "cluster", load_policies=False).store.snapshot()
    for pod in EXAMPLE_PODS:
        expected = _fresh(pod, None, model, CONFIG)
        _memo(pod, None, model, CONFIG)  # seen once
        _memo(pod, None, model, CONFIG)  # remembered
        given_out = _memo(pod, None, model, CONFIG)
        for item in dataclasses.fields(PlacementPlan):
            value = getattr(given_out, item.name)
            if isinstance(value, list | dict):
                value.clear()  # type: ignore[union-attr]
        for toleration in expected.tolerations:
            assert toleration in _memo(pod, None, model, CONFIG).tolerations
        assert _memo(pod, None, model, CONFIG) == expected


def test_copy_plan_copies_every_list_and_dict_field() -> None:
    model = MODELS["cluster"]
    for pod in EXAMPLE_PODS:
        plan = _fresh(pod, None, model, CONFIG)
        copied = copy_plan(plan)
        assert copied == plan
        for item in dataclasses.fields(PlacementPlan):
            value = getattr(plan, item.name)
            if isinstance(value, list | dict) or dataclasses.is_dataclass(value):
                assert getattr(copied, item.name) is not value, item.name


def test_copy_plan_shares_nothing_inside_tolerations_and_affinity_terms() -> None:
    # Nested dicts, lists and tuples at every depth, beside the scalars a copy hands back as they are.
    class Named(dict[str, Any]):
        pass

    nested: dict[str, Any] = {"key": "k", "operator": "Exists", "tolerationSeconds": 30, "ratio": 0.5, "on": True,
                              "none": None, "list": [1, {"deep": ["x"]}], "tuple": ("a", ("b",)),
                              "named": Named(a=[1])}
    plan = PlacementPlan(True, tolerations=[nested, {"effect": "NoSchedule"}], pod_affinity_terms=[{"term": nested}])
    copied = copy_plan(plan)
    assert copied == plan
    assert copied.tolerations[0] is not nested and copied.pod_affinity_terms[0]["term"] is not nested
    for original, copy in ((nested, copied.tolerations[0]), (nested, copied.pod_affinity_terms[0]["term"])):
        assert copy["list"] is not original["list"] and copy["list"][1] is not original["list"][1]
        assert copy["list"][1]["deep"] is not original["list"][1]["deep"]
        assert type(copy["tuple"]) is tuple and type(copy["tuple"][1]) is tuple
        assert copy["named"] == {"a": [1]} and copy["named"]["a"] is not original["named"]["a"]
        copy["list"][1]["deep"].append("y")
        copy["named"]["a"].append(2)
    assert nested["list"] == [1, {"deep": ["x"]}] and nested["named"]["a"] == [1]
    empty = copy_plan(PlacementPlan(True))
    assert empty.tolerations == [] and empty.tolerations is not copy_plan(PlacementPlan(True)).tolerations


def test_a_new_configuration_is_planned_anew() -> None:
    model = build_runtime(CONFIG, EXAMPLES / "cluster", load_policies=False).store.snapshot()
    pod = next(p for p in EXAMPLE_PODS if (p["metadata"].get("annotations") or {}).get("kgwe.io/accelerator"))
    for _ in range(3):
        before = _memo(pod, None, model, CONFIG)
    pricier = CONFIG.model_copy(deep=True)
    pricier.pricing.per_gpu_hour = {k: v * 2 for k, v in pricier.pricing.per_gpu_hour.items()}
    for _ in range(3):
        after = _memo(pod, None, model, pricier)
    assert after == _fresh(pod, None, model, pricier)
    assert before.price_per_gpu_hour is not None and after.price_per_gpu_hour == before.price_per_gpu_hour * 2


def _every_field_set(kind: type) -> Any:
    """An instance of the dataclass `kind` with every field away from its default: a list or dict field holds a
    list or dict of its own, any other field a value of its own, so that a copy that forgets one shows."""
    made = object.__new__(kind)  # every field is set below
    for each in dataclasses.fields(kind):
        if each.default_factory is list:
            value: Any = [[f"{each.name}-item"]]
        elif each.default_factory is dict:
            value = {f"{each.name}-key": 1}
        else:
            value = f"{each.name}-value"
        setattr(made, each.name, value)
    return made


def test_a_plan_an_intent_and_a_demand_copied_hold_every_field_and_share_no_container() -> None:
    # copy_plan, copy_intent and copy_demand name their classes' fields one by one (so that a copy keeps its
    # attributes inline): a field added to one of the classes and left out of its copy fails here.
    for original, copier in ((_every_field_set(PlacementPlan), copy_plan), (_every_field_set(PodIntent), copy_intent),
                             (_every_field_set(GpuDemand), copy_demand)):
        copied = copier(original)
        assert type(copied) is type(original)
        for each in dataclasses.fields(original):
            mine, theirs = getattr(copied, each.name), getattr(original, each.name)
            assert mine == theirs, each.name
            if isinstance(theirs, list | dict):
                assert mine is not theirs, each.name
