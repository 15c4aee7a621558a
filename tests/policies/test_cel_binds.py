"""`cel.bind` after a comprehension that stopped early.

cel-cpp (cel-expr-python 0.1.3) binds lazily through a slot that sibling comprehensions share, and read
the stopped comprehension's element as the bound value; the engine runs every bind as a one-element
`map` instead (policies/engines/cel_binds.py). These hold the policies' answers, not the rewrite.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from policy_fixtures import gpu_pod, gpu_policy

from policies.api import PolicyContext
from policies.engines.cel import build_cel_engine
from policies.engines.cel_binds import without_lazy_binds
from policies.runtime.policy_runtime import build_runtime

# Each is true of _two_containers() ("main" and "side", namespace team-a).
TRUE_AFTER_AN_EARLY_STOP = [
    "object.spec.containers.exists(c, c.name == 'main') && cel.bind(n, object.metadata.namespace, n == 'team-a')",
    "!object.spec.containers.all(c, c.name == 'x') && cel.bind(n, object.metadata.namespace, n == 'team-a')",
    "[1, 2, 3].exists(x, x == 1) && cel.bind(q, 5, q == 5)",
    "[[1, 2, 3].all(x, x == 2), cel.bind(q, 5, q)] == [false, 5]",
    "[1, 2, 3].exists(x, x == 1) ? cel.bind(q, {'max': 4}, q.max == 4) : false",
    "[1, 2].exists(x, x == 1) && cel.bind(a, cel.bind(b, 2, b * 10), a + 1) == 21",
    "[1, 2].map(x, cel.bind(y, x * 10, y + 1)) == [11, 21]",
    "[1, 2].exists(x, x == 1) && cel.bind(q, params.max, q == 3)",
]


def _two_containers(namespace: str = "team-a") -> dict[str, Any]:
    pod = gpu_pod(namespace=namespace)
    pod["spec"]["containers"].append({"name": "side", "image": "busybox"})
    return pod


@pytest.mark.parametrize("expression", TRUE_AFTER_AN_EARLY_STOP)
def test_a_bind_after_an_early_stop_reads_its_own_value(
    expression: str, make_context: Callable[..., PolicyContext]
) -> None:
    runtime = build_runtime(cel_engine="cel-expr-python")  # cel-python has no cel.bind
    policy = gpu_policy("bound", "Deny", validations=[{"expression": expression, "message": "wrong"}],
                        params={"max": 3})
    assert runtime.reload(builtin=False, gpu_policies=[policy]).ok
    assert runtime.check(make_context(_two_containers())) == []


def test_a_deny_written_with_a_bind_still_denies(make_context: Callable[..., PolicyContext]) -> None:
    # The wrong value could admit as well as refuse: a check that must fail for team-a pods.
    runtime = build_runtime(cel_engine="cel-expr-python")
    expression = ("object.spec.containers.exists(c, has(c.resources)) && "
                  "cel.bind(ns, object.metadata.namespace, ns != 'team-a')")
    policy = gpu_policy("no-team-a", "Deny", validations=[{"expression": expression, "message": "not team-a"}])
    assert runtime.reload(builtin=False, gpu_policies=[policy]).ok
    assert [v.message for v in runtime.check(make_context(_two_containers()))] == ["not team-a"]
    assert runtime.check(make_context(_two_containers("team-b"))) == []


@pytest.mark.parametrize("expression", [
    "'cel.bind(x, 1, x)' == \"cel.bind(x, 1, x)\"",  # in strings: left alone
    "size(r'cel.bind(') == 9 && size('''a, cel.bind(''') == 12",
    "cel.bind(s, 'a,b)', s) == 'a,b)'",  # a comma and a parenthesis inside an argument's string
    "cel . bind ( s , [1, (2)] , s ) == [1, 2] // cel.bind( in a comment",
    "cel.bind(s, {'k': [1, 2]}, s.k.size()) == 2",
])
def test_bind_text_in_strings_comments_and_odd_spacing(expression: str) -> None:
    engine = build_cel_engine("cel-expr-python")
    assert engine.compile(expression).evaluate(engine.activation({})) is True


def test_expressions_without_a_bind_run_as_written() -> None:
    for expression in ("object.spec.containers.all(c, c.name != 'bind')", "x.cel.bind(1, 2, 3)", "cel.bind(q, 1)"):
        assert without_lazy_binds(expression) == expression
