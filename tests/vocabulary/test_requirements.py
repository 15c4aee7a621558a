"""The one selector requirement both GPUPolicy selectors and node constraints use."""

from __future__ import annotations

from policies.vocabulary.requirements import Requirement
from policies.vocabulary.selectors import parse_selector


def test_label_selectors_that_say_the_same_thing_are_equal() -> None:
    one = parse_selector({"matchExpressions": [{"key": "team", "operator": "In", "values": ["b", "a", "a"]}]})
    two = parse_selector({"matchExpressions": [{"key": "team", "operator": "In", "values": ["a", "b"]}]})
    assert one == two
    assert one is not None and one.matches({"team": "b"}) and not one.matches({"team": "c"})


def test_node_requirements_keep_their_order_and_render_as_expressions() -> None:
    requirement = Requirement("kgwe.io/accelerator-type", "In", ("nvidia-h100-80gb", "nvidia-a100-80gb"))
    assert requirement.as_expression() == {
        "key": "kgwe.io/accelerator-type", "operator": "In", "values": ["nvidia-h100-80gb", "nvidia-a100-80gb"],
    }
    assert Requirement("kgwe.io/nvlink-clique", "Exists").as_expression() == {
        "key": "kgwe.io/nvlink-clique", "operator": "Exists",
    }


def test_numeric_operators_compare_integers_and_refuse_anything_else() -> None:
    size = Requirement("kgwe.io/nvlink-domain-size", "Gt", ("7",))
    assert size.matches({"kgwe.io/nvlink-domain-size": "8"})
    assert not size.matches({"kgwe.io/nvlink-domain-size": "4"})
    assert not size.matches({"kgwe.io/nvlink-domain-size": "eight"})
    assert not size.matches({})
    assert Requirement("kgwe.io/nvlink-domain-size", "Lt", ("8",)).matches({"kgwe.io/nvlink-domain-size": "4"})
