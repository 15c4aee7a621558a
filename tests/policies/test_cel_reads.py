"""What a CEL expression can read of the request (policies/engines/cel_reads.py).

Paths may reach further up than an expression needs, never less far: a chain of constant steps is
followed, and anything else (a method, a macro, a computed index, a variable passed along whole) keeps
everything below where the chain stopped.
"""

from __future__ import annotations

import pytest

from policies.engines.cel_reads import cel_reads
from policies.engines.projection import Path

OBJECT = ("request", "object")


@pytest.mark.parametrize(("expression", "paths"), [
    ("object.metadata.namespace != 'kube-system'", {(*OBJECT, "metadata", "namespace")}),
    ("object.metadata.labels['kgwe.io/team'] == 'a'", {(*OBJECT, "metadata", "labels", "kgwe.io/team")}),
    ('object.metadata.labels["team"] == "a"', {(*OBJECT, "metadata", "labels", "team")}),
    ("object.?metadata.?labels.orValue({}).size() > 0", {(*OBJECT, "metadata", "labels")}),
    ("object.spec.containers.all(c, c.image != '')", {(*OBJECT, "spec", "containers")}),
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
    # CEL's root-scope dot names the variable too; after an operand it selects a field.
    (".object.metadata.name == 'x'", {(*OBJECT, "metadata", "name")}),
    ("size(.request.userInfo.groups) > 0 && (.namespaceObject).metadata.name == ''",
     {("request", "userInfo", "groups"), ("namespaceObject",)}),
    ("[1].all(object, .object.metadata.uid != '')", {(*OBJECT, "metadata", "uid"), OBJECT}),
    ("object.spec.?request.orValue('') == '' && params.x.object == 1", {(*OBJECT, "spec", "request")}),
])
def test_each_variable_reads_its_chain_of_constant_steps(expression: str, paths: set[Path]) -> None:
    assert cel_reads(expression) == paths
