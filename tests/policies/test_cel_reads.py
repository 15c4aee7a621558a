"""What a CEL expression can read of the request (policies/engines/cel_reads.py).

Paths may reach further up than an expression needs, never less far: a chain of constant steps is
followed, and anything else (a method, a macro, a computed index, a variable passed along whole) keeps
everything below where the chain stopped.
"""

from __future__ import annotations

from collections.abc import Iterable

import pytest

from policies.engines.cel import build_cel_engine
from policies.engines.cel_reads import cel_reads
from policies.engines.projection import EACH, Path

OBJECT = ("request", "object")


@pytest.mark.parametrize(("expression", "paths"), [
    ("object.metadata.namespace != 'kube-system'", {(*OBJECT, "metadata", "namespace")}),
    ("object.metadata.labels['kgwe.io/team'] == 'a'", {(*OBJECT, "metadata", "labels", "kgwe.io/team")}),
    ('object.metadata.labels["team"] == "a"', {(*OBJECT, "metadata", "labels", "team")}),
    ("object.?metadata.?labels.orValue({}).size() > 0", {(*OBJECT, "metadata", "labels")}),
    # A narrowing macro reads of each member what its variable's chains reach (EACH: every member).
    ("object.spec.containers.all(c, c.image != '')", {(*OBJECT, "spec", "containers", EACH, "image")}),
    ("object.spec.containers.exists(c, 'nvidia.com/gpu' in c.?resources.?limits.orValue({}))",
     {(*OBJECT, "spec", "containers", EACH, "resources", "limits")}),
    ("object.spec.containers.map(c, c.name).size() > 1", {(*OBJECT, "spec", "containers", EACH, "name")}),
    ("object.spec.containers.all(c, c.env.exists(e, e.name == 'A'))",
     {(*OBJECT, "spec", "containers", EACH, "env", EACH, "name")}),
    ("object.spec.containers.all(c, has(c.securityContext) && c.image != '')",
     {(*OBJECT, "spec", "containers", EACH, "securityContext"), (*OBJECT, "spec", "containers", EACH, "image")}),
    ("object.spec.containers.exists_one(i, c, c.name == 'x')", {(*OBJECT, "spec", "containers", EACH, "name")}),
    # ... and keeps the members whole where the variable is used whole, or the collection where the body
    # never names it (its size still counts); `filter` answers with members: the collection whole.
    ("object.spec.containers.all(c, c != null)", {(*OBJECT, "spec", "containers")}),
    ("object.spec.containers.all(c, c.image.startsWith(c.name) || size(c) > 3)",
     {(*OBJECT, "spec", "containers")}),
    ("object.spec.containers.all(c, true)", {(*OBJECT, "spec", "containers")}),
    ("object.spec.containers.map(c, c, c.name).size() > 0", {(*OBJECT, "spec", "containers")}),
    ("object.spec.containers.filter(c, c.name == 'x').size() > 0", {(*OBJECT, "spec", "containers")}),
    ("object.spec.containers.all(c, c.env.all(c, c.name != ''))",
     {(*OBJECT, "spec", "containers")}),
    ("object.spec.containers[0].image == ''", {(*OBJECT, "spec", "containers")}),
    ("object.metadata.labels[?'team'].orValue('') == ''", {(*OBJECT, "metadata", "labels")}),
    ("object.metadata.labels[params.key] == 'x'", {(*OBJECT, "metadata", "labels")}),
    ("has(object.metadata.name)", {(*OBJECT, "metadata", "name")}),
    ("cel.bind(o, object, o.metadata.name == 'x')", {OBJECT}),
    ("[object].all(o, o.metadata.uid != '')", {OBJECT}),
    ("object == oldObject", {OBJECT, ("request", "oldObject")}),
    ("request.userInfo.username.startsWith('system:')", {("request", "userInfo", "username")}),
    ("request.userInfo.groups.exists(g, g == 'admins')", {("request", "userInfo", "groups")}),
    ("namespaceObject.metadata.labels.team == object.metadata.labels.team",
     {("namespaceObject", "metadata", "labels", "team"), (*OBJECT, "metadata", "labels", "team")}),
    # Not reads: a field of the same name, a word in a string or a comment, params.
    ("params.object.request == 'object.metadata.name' // request.uid", set()),
    ("object.metadata.labels['a\\'b'] == ''", {(*OBJECT, "metadata", "labels")}),
    ("object.metadata.labels[r'x'] == ''", {(*OBJECT, "metadata", "labels")}),
    ("true ? object.metadata.name : ''", {(*OBJECT, "metadata", "name")}),
    ("object.metadata.name.size() > 3", {(*OBJECT, "metadata", "name")}),
    # A backtick-quoted field name ends a chain (what it selects is read whole); `//` inside it opens no
    # comment that would hide the rest of the line.
    ("has(object.metadata.labels.`a//b`) || object.metadata.name == 'x'",
     {(*OBJECT, "metadata", "labels"), (*OBJECT, "metadata", "name")}),
    ("object.spec.containers.all(c, c.`image` != '' && c.name != '')", {(*OBJECT, "spec", "containers")}),
    # CEL's root-scope dot names the variable too; after an operand it selects a field.
    (".object.metadata.name == 'x'", {(*OBJECT, "metadata", "name")}),
    ("size(.request.userInfo.groups) > 0 && (.namespaceObject).metadata.name == ''",
     {("request", "userInfo", "groups"), ("namespaceObject",)}),
    ("[1].all(object, .object.metadata.uid != '')", {OBJECT}),
    # `in` is an operator spelled as a word: a dot after it opens a root name, never selects a field.
    ("'gpu' in .object.metadata.labels", {(*OBJECT, "metadata", "labels")}),
    ("object.spec.containers.all(c, c.name in.object.metadata.labels)",
     {(*OBJECT, "spec", "containers", EACH, "name"), (*OBJECT, "metadata", "labels")}),
    ("object.spec.?request.orValue('') == '' && params.x.object == 1", {(*OBJECT, "spec", "request")}),
])
def test_each_variable_reads_its_chain_of_constant_steps(expression: str, paths: set[Path]) -> None:
    assert _outermost(cel_reads(expression)) == paths


def _outermost(paths: Iterable[Path]) -> set[Path]:
    """The paths not below another one (a path keeps everything below it)."""
    paths = set(paths)
    return {p for p in paths if not any(q != p and p[:len(q)] == q for q in paths)}


def test_comprehensions_that_declare_one_name_again_and_again_are_read_in_one_walk() -> None:
    # Each level declares `c` again, so the outermost member is used whole. Following a shadowed name once
    # per enclosing comprehension walked 2^depth times: this policy of 324 characters, which cel-cpp
    # accepts, held the worker that first read it for hours.
    depth = 28
    expression = "object.spec.containers.all(c, " + "c.all(c, " * depth + "c.image != ''" + ")" * (depth + 1)
    build_cel_engine("cel-expr-python").compile(expression)
    assert _outermost(cel_reads(expression)) == {(*OBJECT, "spec", "containers")}
