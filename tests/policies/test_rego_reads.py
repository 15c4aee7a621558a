"""What a Rego policy set can read of the input (policies/engines/rego_reads.py), from regorus' own parser.

The projection may read more than a policy needs, never less: each construct that reaches the input
(dotted and bracket paths, computed keys, imports, a bare `input`, a library the policy calls) is held to
the paths it yields, and every construct that defeats the analysis (`with`, a module that does not parse
alone, a `data` reference with a computed root) hands over the whole input.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pytest

from policies.engines.projection import EACH, NOTHING, WHOLE, Path, Projection, projection_of, trimmed
from policies.engines.rego_reads import InputReads, module_reads

HEADER = "package admin.p\nimport rego.v1\n"


def _inputs(body: str, header: str = HEADER) -> set[Path]:
    reads = module_reads("p.rego", header + body)
    assert reads is not None
    return _outermost(reads.inputs)


def _outermost(paths: Iterable[Path]) -> set[Path]:
    """The paths as a projection keeps them: every member whole is the collection whole, and a path below
    another one adds nothing."""
    kept = {trimmed(p) for p in paths}
    return {p for p in kept if not any(q != p and p[:len(q)] == q for q in kept)}


@pytest.mark.parametrize(("body", "paths"), [
    ('deny contains "x" if not input.request.object.metadata.labels.owner',
     {("request", "object", "metadata", "labels", "owner")}),
    ('deny contains "x" if input.request.object.metadata.labels["kgwe.io/team"] == "a"',
     {("request", "object", "metadata", "labels", "kgwe.io/team")}),
    # A computed step, or a variable bound to a member, reads below every member (EACH); everything below
    # where the constant steps end is kept. Iterating keeps every member (NOTHING: none of its keys).
    ('deny contains c.image if { some c in input.request.object.spec.containers; c.image == "x" }',
     {("request", "object", "spec", "containers", EACH, "image"),
      ("request", "object", "spec", "containers", EACH, NOTHING)}),
    ('deny contains "x" if input.request.object.spec.containers[0].image == "x"',
     {("request", "object", "spec", "containers", EACH, "image")}),
    ('deny contains k if { some k; input.request.object.metadata[k] }', {("request", "object", "metadata")}),
    # A computed key is itself read.
    ('deny contains "x" if input.request.object.metadata.labels[input.tenant]',
     {("request", "object", "metadata", "labels"), ("tenant",)}),
    # object.get with literal keys reads below them; with a computed key, all of its object.
    ('deny contains "x" if object.get(input, ["request", "uid"], "") == "u"', {("request", "uid")}),
    ('deny contains "x" if object.get(object.get(input, "intent", {}), "gpus", 0) > 1', {("intent", "gpus")}),
    ('deny contains "x" if object.get(input.request.object.metadata.labels, "team", input.tenant) == "a"',
     {("request", "object", "metadata", "labels", "team"), ("tenant",)}),
    ('deny contains "x" if object.get(input.request, [], {}) == {}', {("request",)}),
    ('deny contains "x" if { some k; object.get(input.request, k, "") == "u" }', {("request",)}),
    ('deny contains "x" if object.get(object.get(input, "a", input.b), "c", 0) > 1', {("a",), ("b",)}),
    ('deny contains "x" if object.get(input, "request", {}).uid == "u"', {("request",)}),
    ('deny contains "x" if object.get({"a": input.x}, "a", 0) == "u"', {("x",)}),
    ('deny contains "x" if count(json.marshal(input)) > 10', {WHOLE}),
    ('deny contains "x" if { x := input; x.request.uid }', {WHOLE}),
    ('deny contains "x" if { every c in input.request.object.spec.containers { c.image } }',
     {("request", "object", "spec", "containers")}),
    ('f(x) := x.name\ndeny contains f(input.request.object.metadata) if true', {("request", "object", "metadata")}),
    ('default allow := false\nallow := input.intent.gpus > 1', {("intent", "gpus")}),
    ('names := [c.name | some c in input.request.object.spec.initContainers]\ndeny contains "x" if count(names) > 1',
     {("request", "object", "spec", "initContainers", EACH, "name"),
      ("request", "object", "spec", "initContainers", EACH, NOTHING)}),
])
def test_each_reference_reads_its_leading_constant_path(body: str, paths: set[Path]) -> None:
    assert _inputs(body) == paths


def test_an_imported_name_reads_what_its_uses_reach() -> None:
    header = "package admin.p\nimport rego.v1\nimport input.request.object as pod\nimport input.request\n"
    assert _inputs('deny contains "x" if pod.metadata.name == "a"', header) == {
        ("request", "object", "metadata", "name")}
    assert _inputs('deny contains "x" if request.userInfo.username == "a"', header) == {
        ("request", "userInfo", "username")}
    assert _inputs('deny contains "x" if { x := pod; x.spec }', header) == {("request", "object")}
    assert _inputs('deny contains "x" if json.marshal(request) == ""', header) == {("request",)}
    assert _inputs('deny contains "x" if true', header) == set()  # an import alone reads nothing


@pytest.mark.parametrize(("rules", "paths"), [
    # A bodiless rule naming a part of the input is read where it is used, as far as the use reaches.
    ('pod := input.request.object\ndeny contains "x" if pod.metadata.labels.team == "a"',
     {("request", "object", "metadata", "labels", "team")}),
    ('pod := input.request.object\nspec := pod.spec\ndeny contains "x" if count(spec.volumes) > 1',
     {("request", "object", "spec", "volumes", EACH, NOTHING)}),  # a count: the members, none of their keys
    ('pod := input.request.object\ndeny contains "x" if object.get(pod.spec, "containers", []) == []',
     {("request", "object", "spec", "containers")}),
    ('pod := input.request.object\ndeny contains "x" if { x := pod; x.spec }', {("request", "object")}),
    ('pod := input.request.object\ndeny contains "x" if pod[k]', {("request", "object")}),
    # Not aliases: a body, a default, two definitions, a computed step, a rule the aggregate reads.
    ('pod := input.request.object if input.request.uid\ndeny contains "x" if pod.metadata.name',
     {("request", "object"), ("request", "uid")}),
    ('default pod := {}\npod := input.request.object\ndeny contains "x" if pod.metadata.name', {("request", "object")}),
    ('pod := input.request.object\npod := input.request.oldObject\ndeny contains "x" if pod.metadata.name',
     {("request", "object"), ("request", "oldObject")}),
    ('c := input.request.object.spec.containers[0]\ndeny contains "x" if c.image',
     {("request", "object", "spec", "containers")}),
    ('deny := input.request.object.metadata.annotations', {("request", "object", "metadata", "annotations")}),
])
def test_rules_that_name_a_part_of_the_input_are_read_where_they_are_used(rules: str, paths: set[Path]) -> None:
    assert _inputs(rules) == paths


def test_with_and_impure_built_ins_are_flagged() -> None:
    rewriting = module_reads("p.rego", HEADER + 'deny contains "x" if { not input.a with input.b as 1 }')
    assert rewriting is not None and rewriting.rewrites
    clock = module_reads("p.rego", HEADER + 'warn contains msg if msg := sprintf("%v", [time.now_ns()])')
    assert clock is not None and clock.impure == frozenset({"time.now_ns"})


def test_a_module_that_does_not_parse_alone_reads_everything() -> None:
    assert module_reads("p.rego", "package admin.p\ndeny contains if {") is None
    reads = InputReads({"broken": [None], "fine": [module_reads("p.rego", HEADER + 'deny contains "x" if input.a')]})
    assert reads.projection() is None


LIBRARY = "package lib.helpers\nimport rego.v1\nteam(pod) := pod.metadata.labels.team\nowner := input.owner\n"


def _set(policy: str, *, more: dict[str, str] | None = None) -> InputReads:
    units: dict[str, dict[str, str]] = {"policy": {"policy.rego": policy, **(more or {})},
                                        "library": {"lib.rego": LIBRARY},
                                        "other": {"other.rego": "package admin.other\nimport rego.v1\n"
                                                                'deny contains "o" if input.other'}}
    return InputReads.of_sources(units, libraries=["library"])


def _paths(projection: Projection | None) -> Any:
    assert projection is not None
    return projection.tree


def test_a_library_runs_only_where_a_running_policy_references_it() -> None:
    alone = _set(HEADER + 'deny contains "x" if input.request.uid == "u"')
    assert _paths(alone.projection()) == {"kgwe": None, "request": {"uid": None}, "other": None}
    calling = _set(HEADER + 'import data.lib.helpers\ndeny contains "x" if helpers.owner == "a"')
    assert _paths(calling.projection()) == {"kgwe": None, "owner": None, "other": None}
    # Skipped (answered natively): its reads and the library's leave the projection.
    assert _paths(calling.projection(["policy"])) == {"kgwe": None, "other": None}


def test_a_package_split_across_files_reads_what_each_file_reads() -> None:
    second = "package admin.p\nimport rego.v1\nextra if input.request.namespace == \"x\"\n"
    split = _set(HEADER + 'deny contains "x" if extra', more={"second.rego": second})
    assert _paths(split.projection(["other"])) == {"kgwe": None, "request": {"namespace": None}}


@pytest.mark.parametrize(("reference", "reached"), [
    ("data[x].deny", {"owner", "other"}),
    ("data.kgwe.aggregate.check", {"owner", "other"}),
    ("data.lib[x].owner", {"owner"}),  # every module under data.lib, and only those
])
def test_data_references_with_computed_steps_read_what_every_module_they_may_reach_reads(
    reference: str, reached: set[str]
) -> None:
    reads = _set(HEADER + f'deny contains "x" if {{ some x; {reference} }}')
    assert set(_paths(reads.projection(["other"]))) == {"kgwe", *reached}


def test_a_rewrite_anywhere_among_the_running_modules_hands_over_everything() -> None:
    reads = _set(HEADER + 'deny contains "x" if { not input.a with input.request.uid as "u" }')
    assert reads.projection() is None
    assert reads.projection(["policy"]) is not None  # not running: the others are projected as usual


def test_the_projection_keeps_whole_subtrees_and_never_changes_a_value() -> None:
    projection = Projection({"request": {"object": {"spec": {"containers": None}}, "uid": None}, "kgwe": None},
                            deterministic=True)
    document = {
        "request": {"object": {"spec": {"containers": [{"name": "a", "env": [{"name": "X"}]}], "volumes": [1]},
                               "metadata": {"name": "p"}},
                    "uid": {"odd": ["shape"]}, "userInfo": {"username": "u"}},
        "kgwe": {"active": {}},
        "intent": {"gpus": 1},
    }
    assert projection.apply(document) == {
        "request": {"object": {"spec": {"containers": [{"name": "a", "env": [{"name": "X"}]}]}},
                    "uid": {"odd": ["shape"]}},
        "kgwe": {"active": {}},
    }
    # A value that is not an object where the path goes on is kept as it is; a missing key stays missing.
    assert projection.apply({"request": {"object": "text"}}) == {"request": {"object": "text"}}
    assert projection.apply({"request": {"object": {}}}) == {"request": {"object": {}}}
    assert projection.apply({}) == {}


def test_an_each_step_cuts_every_member_and_keeps_the_collection_as_long() -> None:
    containers = ("request", "object", "spec", "containers")
    projection = projection_of([(*containers, EACH, "image"), (*containers, EACH, "env", EACH, "name"),
                                ("request", "object", "metadata", "labels", EACH, "x")])
    assert projection is not None
    document = {"request": {"object": {
        "spec": {"containers": [{"name": "a", "image": "i", "env": [{"name": "X", "value": "1"}]},
                                {"name": "b"}, "odd", None, {"env": "text"}]},
        "metadata": {"labels": {"a": "1", "b": {"x": 1, "y": 2}}, "name": "p"},
    }}}
    assert projection.apply(document) == {"request": {"object": {
        "spec": {"containers": [{"image": "i", "env": [{"name": "X"}]}, {}, "odd", None, {"env": "text"}]},
        # an object's members are its values: every key stays
        "metadata": {"labels": {"a": "1", "b": {"x": 1}}},
    }}}
    # Not a collection where the step is: kept as it is.
    assert projection.apply({"request": {"object": {"spec": {"containers": "text"}}}}) == {
        "request": {"object": {"spec": {"containers": "text"}}}}


def test_a_node_read_through_each_and_by_name_is_kept_whole() -> None:
    labels = ("request", "object", "metadata", "labels")
    mixed = projection_of([(*labels, EACH, "x"), (*labels, "team")])
    assert mixed is not None and mixed.tree == {"request": {"object": {"metadata": {"labels": None}}}}
    # Every member whole is the collection whole, and a document is no collection of members.
    assert projection_of([(*labels, EACH)]).tree == projection_of([labels]).tree  # type: ignore[union-attr]
    assert projection_of([(EACH, "x")]) is None


POD_LIBRARY = ("package lib.pod\nimport rego.v1\npod := input.request.object\nlabels := pod.metadata.labels\n"
               "names := [c.name | some c in pod.spec.containers]\n")
CONTAINERS = ("request", "object", "spec", "containers")
# What the library's `names` reads: each container's name (and how many there are).
NAMES = {(*CONTAINERS, EACH, "name"), (*CONTAINERS, EACH, NOTHING)}


@pytest.mark.parametrize(("policy", "paths"), [
    ('import data.lib.pod\ndeny contains "x" if pod.pod.metadata.name',
     {("request", "object", "metadata", "name"), *NAMES}),
    ('deny contains "x" if data.lib.pod.labels.team',
     {("request", "object", "metadata", "labels", "team"), *NAMES}),
    ('deny contains "x" if count(data.lib.pod.names) > 1', {*NAMES}),
    ('import data.lib\ndeny contains "x" if lib.pod.pod.spec', {("request", "object", "spec"), *NAMES}),
    # The whole package, or a computed step into it: every alias it holds, whole.
    ('deny contains "x" if { some k, v in data.lib.pod; v }', {("request", "object"), *NAMES,
                                                             ("request", "object", "metadata", "labels")}),
    ('deny contains "x" if { some k; data.lib.pod[k].spec }', {("request", "object"), *NAMES,
                                                              ("request", "object", "metadata", "labels")}),
])
def test_a_library_alias_is_read_as_far_as_each_reference_reaches(policy: str, paths: set[Path]) -> None:
    reads = InputReads.of_sources({"policy": {"policy.rego": HEADER + policy}, "library": {"pod.rego": POD_LIBRARY}},
                                  libraries=["library"])
    projection = reads.projection()
    assert projection is not None
    assert _outermost(projection.paths) == _outermost({("kgwe",), *paths})


def test_nested_comprehensions_are_read_once_per_level() -> None:
    # Asked again from every level and every round of the outer fixpoint, 30 levels took ~2^30 steps: a
    # 700-character policy would stall the reload that reads it. (No time is asserted: the suite's
    # timeout is the bound.)
    inner = "input.x"
    for level in range(30):
        inner = f"[v{level} | some v{level} in {inner}]"
    assert _inputs(f"deny contains c.name if {{ some c in {inner} }}") == {("x", EACH, "name"), ("x", EACH, NOTHING)}
