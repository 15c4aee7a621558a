"""A request's CEL expressions joined into one evaluation (policies/engines/cel_batches.py).

Joining must never change an answer: a failing expression, one over the time limit or one of the wrong
type is still told apart and charged to its own policy, and match conditions still gate validations.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from policy_fixtures import comparing_runtime, gpu_pod, gpu_policy

from policies.api import PolicyContext
from policies.engines.cel import build_cel_engine
from policies.engines.cel_batches import JoinedPrograms
from policies.runtime import build_runtime


def _policies() -> list[dict[str, Any]]:
    gpus = "int(object.spec.containers[0].resources.limits['nvidia.com/gpu'])"
    big = [{"name": "big", "expression": f"{gpus} > 2"}]
    return [
        gpu_policy(f"at-most-{n}", "Deny", validations=[
            {"expression": f"{gpus} <= params.max", "message": f"at most {n}"},
            {"expression": "object.metadata.namespace != 'kube-system'", "message": "not in kube-system"},
        ], params={"max": n})
        for n in (1, 2, 4, 8)
    ] + [
        gpu_policy("big-needs-label", "Warn", matchConditions=big, validations=[
            {"expression": "'owner' in object.metadata.labels", "message": "big pods need an owner"},
        ]),
        gpu_policy("big-not-team-b", "Deny", matchConditions=big, validations=[
            {"expression": "object.metadata.namespace != 'team-b' // trailing comment", "message": "not team-b"},
        ]),
    ]


def _answers(engine: str, make_context: Callable[..., PolicyContext], pod: dict[str, Any]) -> list[tuple[str, ...]]:
    runtime = comparing_runtime(engine)
    assert runtime.reload(builtin=False, gpu_policies=_policies()).ok
    return sorted((v.policy, v.action, v.message) for v in runtime.check(make_context(pod)))


def test_joined_expressions_answer_as_the_engine_that_runs_them_one_by_one(
    make_context: Callable[..., PolicyContext]
) -> None:
    # cel-python cannot join: it evaluates every expression on its own.
    for pod in (gpu_pod(gpus="1"), gpu_pod(gpus="3"), gpu_pod(gpus="6", namespace="team-b"),
                gpu_pod(gpus="6", labels={"owner": "ml"})):
        assert _answers("cel-expr-python", make_context, pod) == _answers("cel-python", make_context, pod)
    assert _answers("cel-expr-python", make_context, gpu_pod(gpus="3")) == [
        ("at-most-1", "Deny", "at most 1"), ("at-most-2", "Deny", "at most 2"),
        ("big-needs-label", "Warn", "big pods need an owner"),
    ]


def test_a_failing_expression_is_charged_to_its_policy_alone(make_context: Callable[..., PolicyContext]) -> None:
    runtime = build_runtime(failure_mode="closed")
    policies = [
        gpu_policy("fine", "Deny", validations=[{"expression": "true", "message": "never"}]),
        gpu_policy("broken", "Deny", validations=[{"expression": "object.metadata.nope == 'x'"}]),
        gpu_policy("refuses", "Deny", validations=[{"expression": "false", "message": "no"}]),
        gpu_policy("not-a-bool", "Deny", matchConditions=[{"name": "n", "expression": "1"}],
                   validations=[{"expression": "false", "message": "gated"}]),
    ]
    assert runtime.reload(builtin=False, gpu_policies=policies).ok
    violations = {v.policy: v.message for v in runtime.check(make_context(gpu_pod()))}
    assert set(violations) == {"broken", "refuses", "not-a-bool"}
    assert "nope" in violations["broken"]
    assert violations["refuses"] == "no"
    assert "did not return a bool" in violations["not-a-bool"]


def test_the_time_limit_still_holds_each_expression_alone(make_context: Callable[..., PolicyContext]) -> None:
    runtime = build_runtime(failure_mode="closed")
    runtime.cel_time_limit = 0.005
    # 3,600 concatenations of 20 KB strings: tens of milliseconds, within cel-cpp's iteration budget.
    slow = ("object.metadata.annotations['blob'].split(',').map(a, object.metadata.annotations['blob']"
            ".split(',').map(b, a + b).filter(c, c.startsWith('x')).size()).all(n, n == 0)")
    policies = [
        gpu_policy("slow", "Deny", validations=[{"expression": slow, "message": "blob"}]),
        gpu_policy("quick", "Deny", validations=[{"expression": "size(object.spec.containers) > 0"}]),
        gpu_policy("quick-too", "Deny", validations=[{"expression": "object.metadata.namespace != ''"}]),
    ]
    assert runtime.reload(builtin=False, gpu_policies=policies).ok
    pod = gpu_pod()
    pod["metadata"]["annotations"]["blob"] = ",".join("a" * 10000 + str(n) for n in range(60))
    violations = runtime.check(make_context(pod))
    assert [v.policy for v in violations] == ["slow"]
    assert "time limit" in violations[0].message


def test_joined_programs_compile_a_bounded_number_of_sets_and_stay_right() -> None:
    # A pod creator chooses which policies a request activates: new sets must not cost a compile each.
    engine = build_cel_engine()
    programs = [engine.compile(f"{n} + 1") for n in range(4)]
    joined = JoinedPrograms(engine, limit=2)
    activation = engine.activation({})
    for first in range(2):
        program = joined.get(programs[first:first + 2])
        assert program is not None
        assert program.evaluate(activation) == [first + 1, first + 2]
    assert joined.get(programs[2:4]) is None  # the budget is spent: evaluated one by one
    again = joined.get(programs[0:2])  # sets compiled before are still served
    assert again is not None and again.evaluate(activation) == [1, 2]
