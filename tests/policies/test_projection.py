"""A projection's compiled cut (a program written for its tree) keeps exactly what the tree walk keeps,
on any document: the engines' inputs and the memo key are built by it on every request."""

from __future__ import annotations

from typing import Any

from effort import tries
from hypothesis import given, settings
from hypothesis import strategies as st

from policies.engines.projection import EACH, MAX_COMPILED_NODES, NOTHING, Path, _apply, projection_of

# Keys a policy may name, hostile ones included: quotes, backslashes, newlines, Python words.
KEYS = st.sampled_from(["a", "b", "spec", "containers", "'", '"', "\\", "x\ny", "def", "return", "d", "kept",
                        "v", "m", "k", EACH, NOTHING, "é"])
LEAVES = st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=3))
DOCUMENTS = st.recursive(
    LEAVES,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(KEYS, inner, max_size=4)),
    max_leaves=25,
)
PATHS = st.lists(st.lists(KEYS, min_size=1, max_size=5).map(tuple), min_size=1, max_size=6)


def _walked(paths: list[Path], document: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]] | None:
    projection = projection_of(paths)
    if projection is None:
        return None
    return projection.apply(document), _apply(document, projection.tree)


@settings(max_examples=tries(100, 400), deadline=None)
@given(PATHS, st.dictionaries(KEYS, DOCUMENTS, max_size=4))
def test_the_compiled_cut_keeps_what_the_walk_keeps(paths: list[Path], document: dict[str, Any]) -> None:
    both = _walked(paths, document)
    if both is not None:
        compiled, walked = both
        assert compiled == walked
        assert repr(compiled) == repr(walked)  # the same key order, the same types


def test_members_are_cut_in_arrays_and_objects_alike() -> None:
    projection = projection_of([("spec", "containers", EACH, "image"), ("spec", "volumes", EACH, NOTHING)])
    assert projection is not None
    document = {"spec": {"containers": [{"image": "a", "name": "n"}, "odd", {"name": "m"}],
                         "volumes": {"one": {"secret": "s"}, "two": 3}, "hostNetwork": True}}
    assert projection.apply(document) == {
        "spec": {"containers": [{"image": "a"}, "odd", {}], "volumes": {"one": {}, "two": 3}}}


def test_deep_and_large_trees_cut_alike() -> None:
    deep = tuple(f"k{i}" for i in range(300))
    projection = projection_of([deep])
    assert projection is not None
    document: dict[str, Any] = {}
    node = document
    for key in deep[:50]:
        node[key] = {}
        node = node[key]
    assert projection.apply(document) == _apply(document, projection.tree)
    # Past MAX_COMPILED_NODES the tree is walked instead.
    wide = projection_of([("spec", f"field{i}", "x") for i in range(MAX_COMPILED_NODES + 10)])
    assert wide is not None
    assert wide.apply({"spec": {"field3": {"x": 1, "y": 2}}}) == {"spec": {"field3": {"x": 1}}}


class _Hostile:
    """A key whose text would be code if written as it prints."""

    def __repr__(self) -> str:
        return "__import__('os').system('exit 1')"

    def __hash__(self) -> int:
        return 1

    def __eq__(self, other: object) -> bool:
        return other is self


def test_only_string_keys_are_written_into_the_program() -> None:
    hostile = _Hostile()
    projection = projection_of([("spec", hostile)])  # type: ignore[list-item]
    assert projection is not None
    assert projection.apply({"spec": {hostile: 1, "other": 2}}) == {"spec": {hostile: 1}}
    assert projection._cutter.func is _apply  # type: ignore[attr-defined]  # walked, not compiled
