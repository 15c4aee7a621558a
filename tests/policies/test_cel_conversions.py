"""`int()`, `uint()`, `double()`, `timestamp()` of strings parse as Kubernetes (cel-go, Go's strconv) parses.

cel-cpp (cel-expr-python 0.1.3) accepted white space around the text, a signed uint, a hexadecimal
double without exponent, and made an out-of-range double infinite; the pod's creator writes these
strings. policies/engines/cel_conversions.py checks the text first.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from policy_fixtures import gpu_pod, gpu_policy

from policies.api import PolicyContext
from policies.engines.cel import CelEvaluationError, build_cel_engine
from policies.engines.cel_conversions import strict_conversions
from policies.runtime.policy_runtime import build_runtime

GPUS = "int(object.metadata.annotations['kgwe.io/gpus']) <= 4"


def _annotated(value: str) -> dict[str, Any]:
    pod = gpu_pod()
    pod["metadata"]["annotations"]["kgwe.io/gpus"] = value
    return pod


@pytest.mark.parametrize(("annotation", "refused_as"), [
    ("4", None), ("+4", None), ("04", None),  # Go's ParseInt reads these
    ("9", "at most 4"),
    (" 9", "the policy engine failed"), ("9\n", "the policy engine failed"), ("0x9", "the policy engine failed"),
])
def test_a_deny_on_an_annotation_parses_it_as_kubernetes_does(
    annotation: str, refused_as: str | None, make_context: Callable[..., PolicyContext]
) -> None:
    # Fail closed: a text Kubernetes cannot read refuses the pod as an engine failure, where cel-cpp read
    # ' 9' as 9 (and admitted '9\n' the same way).
    runtime = build_runtime(failure_mode="closed")
    policy = gpu_policy("gpus", "Deny", validations=[{"expression": GPUS, "message": "at most 4"}])
    assert runtime.reload(builtin=False, gpu_policies=[policy]).ok
    messages = [v.message for v in runtime.check(make_context(_annotated(annotation)))]
    if refused_as is None:
        assert messages == []
    else:
        assert len(messages) == 1 and refused_as in messages[0]


@pytest.mark.parametrize(("expression", "expected"), [
    ("[int('+1'), int('-0'), int('0010'), int(2.7), int(1u)]", [1, 0, 10, 2, 1]),
    ("[uint('1'), uint(2)]", [1, 2]),
    ("[double('1.5'), double('.5'), double('5.'), double('1e3'), double('0x1p3'), double(3)]",
     [1.5, 0.5, 5.0, 1000.0, 8.0, 3.0]),
    ("double('-Inf') < 0.0 && double('infinity') > 0.0 && double('NaN') != double('nan')", True),
    ("int(timestamp('2026-01-01T00:00:00Z'))", 1767225600),
    ("['1', '2'].map(s, int(s)) == [1, 2] && int(string(int('7'))) == 7", True),
    ("'int( 1)' + \"double( 1)\" // int(' 1')", "int( 1)double( 1)"),  # strings and comments: left alone
])
def test_what_go_reads_still_converts(expression: str, expected: Any) -> None:
    engine = build_cel_engine("cel-expr-python")
    assert engine.compile(expression).evaluate(engine.activation({})) == expected


@pytest.mark.parametrize("expression", [
    "int(' 1')", "int('1 ')", "int('\\t1')", "uint('+1')", "uint(' 1')", "double(' 1.5')", "double('0x10')",
    "double('1e400')", "double('-nan')", "double('+NaN')", "timestamp(' 2026-01-01T00:00:00Z')",
    "[' 1'].map(s, int(s))", "int('\\v1')",
])
def test_what_go_refuses_fails(expression: str) -> None:
    engine = build_cel_engine("cel-expr-python")
    program = engine.compile(expression)
    with pytest.raises(CelEvaluationError):
        program.evaluate(engine.activation({}))


def test_expressions_without_conversions_run_as_written() -> None:
    for expression in ("object.int(1)", "type(1) == int", "'int(x)'", "x.double"):
        assert strict_conversions(expression) == expression
