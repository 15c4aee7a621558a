"""A projection keeps what its readers can read: members of collections cut alike in arrays and objects,
deep trees and wide ones."""

from __future__ import annotations

from typing import Any

from policies.engines.projection import EACH, NOTHING, projection_of


def test_members_are_cut_in_arrays_and_objects_alike() -> None:
    projection = projection_of([("spec", "containers", EACH, "image"), ("spec", "volumes", EACH, NOTHING)])
    assert projection is not None
    document = {"spec": {"containers": [{"image": "a", "name": "n"}, "odd", {"name": "m"}],
                         "volumes": {"one": {"secret": "s"}, "two": 3}, "hostNetwork": True}}
    assert projection.apply(document) == {
        "spec": {"containers": [{"image": "a"}, "odd", {}], "volumes": {"one": {}, "two": 3}}}


def test_deep_and_wide_trees_are_cut() -> None:
    deep = tuple(f"k{i}" for i in range(300))
    projection = projection_of([deep])
    assert projection is not None
    document: dict[str, Any] = {}
    node = document
    for key in deep[:50]:
        node[key] = {}
        node = node[key]
    assert projection.apply(document) == document  # every key on the way is kept
    wide = projection_of([("spec", f"field{i}", "x") for i in range(2010)])
    assert wide is not None
    assert wide.apply({"spec": {"field3": {"x": 1, "y": 2}}}) == {"spec": {"field3": {"x": 1}}}
