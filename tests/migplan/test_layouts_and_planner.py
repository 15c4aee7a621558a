"""The MIG planner: only layouts the GPU model can hold, waiting pods and recommendations served, the
preferred mix filling what is left, busy nodes untouched (SPEC section 11; REFERENCE Part E 3)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from policies.vocabulary.mig_geometry import MIG_RULES
from webhook.migplan.demand import Want, recommended_wants
from webhook.migplan.layouts import compute_of, layout_of, layouts, maximal_layouts, valid
from webhook.migplan.mig_config import config_entries, config_name, mig_parted_document
from webhook.migplan.planner import NodeInput, Wanted, plan_node

A100 = "nvidia-a100-80gb"


@pytest.mark.parametrize("instances", [
    ["1g.10gb"] * 7,
    ["4g.40gb", "3g.40gb"],
    ["3g.40gb", "3g.40gb"],
    ["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"],
    ["4g.40gb", "2g.20gb", "1g.10gb"],
    ["2g.20gb", "2g.20gb", "2g.20gb", "1g.10gb"],
    ["7g.80gb"],
])
def test_the_a100_layouts_nvidia_documents_are_valid(instances: list[str]) -> None:
    assert valid(A100, layout_of(instances))


@pytest.mark.parametrize("instances", [
    ["3g.40gb", "3g.40gb", "1g.10gb"],  # two 3g take all eight memory slices
    ["4g.40gb", "4g.40gb"],  # one 4g per GPU
    ["1g.10gb"] * 8,  # seven compute slices
    ["7g.80gb", "1g.10gb"],
    ["1g.20gb"] * 5,  # four double-memory 1g at most
    ["2g.20gb"] * 3 + ["1g.20gb", "1g.10gb"],
    ["1g.5gb"],  # an A100-40GB profile
])
def test_layouts_the_slices_cannot_hold_are_invalid(instances: list[str]) -> None:
    assert not valid(A100, layout_of(instances))


def test_every_enumerated_layout_is_valid_and_the_maximal_ones_are_full() -> None:
    for type_id, rules in MIG_RULES.items():
        found = layouts(type_id)
        assert found and all(valid(type_id, layout) for layout in found)
        for layout in maximal_layouts(type_id):
            assert not any(valid(type_id, layout_of([p for p, n in layout for _ in range(n)] + [extra]))
                           for extra in rules.memory_slices), (type_id, layout)
    assert layout_of(["3g.40gb", "3g.40gb", "1g.10gb"]) not in layouts(A100)
    assert max(compute_of(layout) for layout in layouts("nvidia-a30-24gb")) == 4


def _node(name: str = "n1", gpus: int = 2, current: dict[str, int] | None = None, running: tuple[str, ...] = (),
          strategy: str = "mixed", state: str | None = "success") -> NodeInput:
    return NodeInput(name, A100, gpus, strategy, current if current is not None else {"1g.10gb": 14},
                     "all-1g.10gb", state, running)


def _pending(who: str, profile: str, slices: int = 1) -> Want:
    return Want("pending", who, ((A100, profile),), slices)


def test_waiting_pods_are_served_with_valid_layouts_only() -> None:
    wanted = Wanted([_pending("a/big", "4g.40gb"), _pending("a/mid", "3g.40gb", 2), _pending("a/small", "2g.20gb")])
    plan = plan_node(_node(), wanted, [], 0.0)
    assert plan.action == "change"
    assert all(valid(A100, layout) for layout in plan.layouts) and len(plan.layouts) == 2
    assert plan.planned["4g.40gb"] == 1 and plan.planned["3g.40gb"] == 2 and plan.planned["2g.20gb"] >= 1
    assert wanted.left == [0, 0, 0]
    assert {(who, n) for _s, who, _p, n in plan.serves} == {("a/big", 1), ("a/mid", 2), ("a/small", 1)}


def test_a_busy_node_is_left_as_it_is_and_serves_nothing() -> None:
    wanted = Wanted([_pending("a/big", "4g.40gb")])
    plan = plan_node(_node(running=("team-a/runs",)), wanted, [], 0.0)
    assert plan.action == "keep" and "running pod" in plan.reason and "team-a/runs" in plan.reason
    assert plan.planned == plan.current and wanted.left == [1]


def test_a_node_the_mig_manager_is_reconfiguring_is_left_alone() -> None:
    plan = plan_node(_node(state="pending"), Wanted([_pending("a/big", "4g.40gb")]), [], 0.0)
    assert plan.action == "keep" and "reconfiguring" in plan.reason


def test_nothing_wanted_keeps_the_layout() -> None:
    plan = plan_node(_node(), Wanted([]), [], 0.0)
    assert plan.action == "keep" and plan.planned == {"1g.10gb": 14}
    served = plan_node(_node(), Wanted([_pending("a/one", "1g.10gb", 3)]), [], 0.0)
    assert served.action == "keep" and "already serves" in served.reason


def test_gpus_nothing_is_wanted_of_keep_their_layout() -> None:
    plan = plan_node(_node(gpus=2), Wanted([_pending("a/big", "7g.80gb")]), [], 0.0)
    assert plan.action == "change"
    assert sorted(plan.layouts) == sorted([layout_of(["7g.80gb"]), layout_of(["1g.10gb"] * 7)])


def test_min_utilization_keeps_a_node_demand_would_barely_use() -> None:
    plan = plan_node(_node(gpus=2), Wanted([_pending("a/one", "2g.20gb")]), [], 0.5)
    assert plan.action == "keep" and "minUtilization" in plan.reason


def test_preferred_profiles_fill_what_demand_leaves() -> None:
    plan = plan_node(_node(gpus=2, current={"1g.10gb": 14}), Wanted([]), [("3g.40gb", 0.85)], 0.0)
    assert plan.action == "change" and plan.planned.get("3g.40gb") == 3
    assert all(valid(A100, layout) for layout in plan.layouts)


def test_single_strategy_nodes_get_one_profile_on_every_gpu() -> None:
    plan = plan_node(_node(strategy="single"), Wanted([_pending("a/mid", "3g.40gb")]), [], 0.0)
    assert plan.action == "change" and plan.planned == {"3g.40gb": 4}
    assert len({tuple(layout) for layout in plan.layouts}) == 1


def test_demand_is_shared_out_node_after_node() -> None:
    wanted = Wanted([_pending("a/big", "4g.40gb", 3)])
    first = plan_node(_node("n1", gpus=2), wanted, [], 0.0)
    second = plan_node(_node("n2", gpus=2), wanted, [], 0.0)
    assert first.planned["4g.40gb"] == 2 and second.planned["4g.40gb"] == 1 and wanted.left == [0]


def test_waiting_pods_come_before_recommended_workloads() -> None:
    recommended = Want("recommended", "Deployment/a/web", ((A100, "3g.40gb"),), 2)
    wanted = Wanted([recommended, _pending("a/big", "4g.40gb")])
    plan = plan_node(_node(gpus=1, current={"1g.10gb": 7}), wanted, [], 0.0)
    assert plan.planned == {"3g.40gb": 1, "4g.40gb": 1} and wanted.left == [1, 0]


def test_recommendations_onto_mig_become_wants() -> None:
    def found(kind: str, change: bool, pods_now: int) -> SimpleNamespace:
        shape = SimpleNamespace(kind=kind, type_id=A100, profile="2g.20gb", gpus=1)
        return SimpleNamespace(recommended=shape, change=change, pods_now=pods_now,
                               workload=SimpleNamespace(key="Deployment/a/web"))

    wants = recommended_wants([found("mig", True, 3), found("mig", False, 3), found("mps", True, 3)])
    assert wants == [Want("recommended", "Deployment/a/web", ((A100, "2g.20gb"),), 3)]


def test_the_mig_manager_config_groups_gpus_and_names_by_content() -> None:
    same = config_entries([layout_of(["1g.10gb"] * 7)] * 2)
    assert same == [{"devices": "all", "mig-enabled": True, "mig-devices": {"1g.10gb": 7}}]
    mixed = config_entries([layout_of(["7g.80gb"]), layout_of(["1g.10gb"] * 7), layout_of(["7g.80gb"])])
    assert mixed == [{"devices": [0, 2], "mig-enabled": True, "mig-devices": {"7g.80gb": 1}},
                     {"devices": [1], "mig-enabled": True, "mig-devices": {"1g.10gb": 7}}]
    name = config_name(A100, mixed)
    assert name.startswith("kgwe-a100-80gb-") and len(name) <= 63 and name == config_name(A100, list(mixed))
    assert name != config_name(A100, same)
    assert mig_parted_document({name: mixed}) == {"version": "v1", "mig-configs": {name: mixed}}
