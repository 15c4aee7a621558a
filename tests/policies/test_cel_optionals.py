"""`optMap` and `optFlatMap` after a comprehension that stopped early.

cel-cpp (cel-expr-python 0.1.3) binds the macro's variable the way it binds `cel.bind`'s, lazily through a
slot sibling comprehensions share, and read the stopped comprehension's element as the optional's value;
the engine runs both macros as plain comprehensions instead (policies/engines/cel_optionals.py). These hold
the policies' answers, then the rewrite's edges.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from policy_fixtures import gpu_pod, gpu_policy

from policies.api import PolicyContext
from policies.engines.cel import CelEvaluationError, build_cel_engine
from policies.engines.cel_optionals import MAX_OPTIONAL_MAPS, without_lazy_optional_maps
from policies.runtime.policy_runtime import build_runtime

# Each is true of _two_containers() ("main" and "side", namespace team-a, one GPU).
TRUE_AFTER_AN_EARLY_STOP = [
    "[1, 2, 3].exists(x, x == 1) && optional.of(5).optMap(v, v).value() == 5",
    "[1, 2, 3].exists(x, x == 1) && optional.of(5).optFlatMap(v, optional.of(v)).value() == 5",
    "!object.spec.containers.all(c, c.name == 'x') && "
    "object.?metadata.?namespace.optMap(n, n == 'team-a').orValue(false)",
    "object.spec.containers.exists(c, c.name == 'main') && "
    "object.spec.containers[0].resources.limits[?'nvidia.com/gpu'].optMap(g, int(g)).orValue(0) == 1",
    "[[1, 2, 3].exists(x, x == 1), optional.of(5).optMap(v, v).value()] == [true, 5]",
    "[1, 2].exists(x, x == 1) && optional.of({'a': 2}).optMap(m, m.a).optMap(v, v * 10).value() == 20",
    "[1, 2].map(x, optional.of(x).optMap(y, y * 10).value()) == [10, 20]",
    "[1, 2].exists(x, x == 1) && optional.of(params).optMap(p, p.max).value() == 3",
]


def _two_containers(namespace: str = "team-a") -> dict[str, Any]:
    pod = gpu_pod(namespace=namespace)
    pod["spec"]["containers"].append({"name": "side", "image": "busybox"})
    return pod


@pytest.mark.parametrize("expression", TRUE_AFTER_AN_EARLY_STOP)
def test_an_optional_map_after_an_early_stop_reads_its_own_value(
    expression: str, make_context: Callable[..., PolicyContext]
) -> None:
    runtime = build_runtime(cel_engine="cel-expr-python")  # cel-python has no optional values
    policy = gpu_policy("mapped", "Deny", validations=[{"expression": expression, "message": "wrong"}],
                        params={"max": 3})
    assert runtime.reload(builtin=False, gpu_policies=[policy]).ok
    assert runtime.check(make_context(_two_containers())) == []


def test_a_deny_written_with_opt_map_still_denies(make_context: Callable[..., PolicyContext]) -> None:
    # Unfixed, the namespace read as a container map: the check errored for every pod instead of
    # refusing team-a's.
    runtime = build_runtime(cel_engine="cel-expr-python")
    expression = ("object.spec.containers.exists(c, has(c.resources)) && "
                  "object.?metadata.?namespace.optMap(ns, ns != 'team-a').orValue(true)")
    policy = gpu_policy("no-team-a", "Deny", validations=[{"expression": expression, "message": "not team-a"}])
    assert runtime.reload(builtin=False, gpu_policies=[policy]).ok
    assert [v.message for v in runtime.check(make_context(_two_containers()))] == ["not team-a"]
    assert runtime.check(make_context(_two_containers("team-b"))) == []


@pytest.mark.parametrize(("expression", "expected"), [
    ("optional.none().optMap(x, 1 / 0).hasValue()", False),  # the body runs only on a value
    ("optional.of(1).optFlatMap(x, optional.none()).hasValue()", False),
    ("optional.of(' a ').optMap(s, s.trim()).optFlatMap(t, {'a': 1}[?t]).value()", 1),  # a chain
    ("optional.of(2).optMap(v, optional.of(v).optMap(w, w * v).value()).value()", 4),  # nested
    ("'x.optMap(v, v)' + \"optFlatMap(\" == 'x.optMap(v, v)optFlatMap('", True),  # in strings: left alone
    ("optional.of([1, 2]).optMap(l, l[1]) // .optMap( in a comment\n.value()", 2),
    ("[1, 2][?1].optMap(kgwe__opt, kgwe__opt + 1).value()", 3),  # the rewrite's own name, taken
    ("-optional.of(3).optMap(v, v).value() == -3 && 2 in [optional.of(2).optMap(v, v).value()]", True),
])
def test_opt_map_values(expression: str, expected: Any) -> None:
    engine = build_cel_engine("cel-expr-python")
    assert engine.compile(expression).evaluate(engine.activation({})) == expected


def test_a_failing_body_fails_the_map() -> None:
    engine = build_cel_engine("cel-expr-python")
    with pytest.raises(CelEvaluationError, match="divide by zero"):
        engine.compile("optional.of(1).optMap(x, 1 / 0).hasValue()").evaluate(engine.activation({}))


def test_expressions_without_the_macros_run_as_written() -> None:
    for expression in ("object.?spec.?optMap.orValue(1)", "x.optMap", "'optMap(v, v)'", "f(x).optMap(v)"):
        assert without_lazy_optional_maps(expression) == expression


def test_long_optional_map_chains_are_refused_at_load(make_context: Callable[..., PolicyContext]) -> None:
    # cel-cpp's parser expands a chain of n calls to 2^n copies of the operand, holding the GIL: 18 took
    # seconds, 30 would take hours. The policy is refused before the parser sees it; 8 still load.
    runtime = build_runtime(cel_engine="cel-expr-python")
    chain = "optional.of(1)" + ".optMap(v, v + 1)" * (MAX_OPTIONAL_MAPS + 1) + ".value() > 0"
    report = runtime.reload(builtin=False, gpu_policies=[
        gpu_policy("chained", validations=[{"expression": chain, "message": "x"}])])
    assert not report.ok
    assert "more than 8" in report.errors["chained"] and "optMap" in report.errors["chained"]
    within = "optional.of(1)" + ".optMap(v, v + 1)" * MAX_OPTIONAL_MAPS + ".value() == 9"
    report = runtime.reload(builtin=False, gpu_policies=[
        gpu_policy("chained", validations=[{"expression": within, "message": "x"}])])
    assert report.ok
    assert runtime.check(make_context(_two_containers())) == []
