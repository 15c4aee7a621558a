"""One CEL activation per request for every GPUPolicy, and each expression evaluated once per request.

Policies share one activation whatever their params (cel-expr-python binds each policy's `params` with
`cel.bind`), and an expression stated by several policies is evaluated once per request (per params
when it reads them). What a policy decides must not change: these tests hold both engines to that.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from policy_fixtures import comparing_runtime, gpu_pod, gpu_policy

from policies.api import PolicyContext, Violation
from policies.runtime.policy_runtime import PolicyRuntime, build_runtime

ENGINES = ["cel-expr-python", "cel-python"]
AT_MOST = "object.spec.containers.all(c, int(c.resources.limits['nvidia.com/gpu']) <= params.max)"


def _limit(name: str, most: int, expression: str = AT_MOST, **extra: Any) -> dict[str, Any]:
    return gpu_policy(name, "Deny", validations=[{"expression": expression, "message": f"{name}: at most {most}",
                                                  **extra}], params={"max": most})


@pytest.fixture(params=ENGINES)
def runtime(request: pytest.FixtureRequest) -> PolicyRuntime:
    return comparing_runtime(request.param)


def _denied(runtime: PolicyRuntime, context: PolicyContext) -> list[str]:
    return sorted(v.message for v in runtime.check(context) if v.action == "Deny")


def test_each_policy_reads_its_own_params(runtime: PolicyRuntime, make_context: Callable[..., PolicyContext]) -> None:
    policies = [_limit("two", 2), _limit("four", 4), _limit("eight", 8), _limit("four-again", 4)]
    assert runtime.reload(builtin=False, gpu_policies=policies).ok
    assert _denied(runtime, make_context(gpu_pod(gpus="4"))) == ["two: at most 2"]
    assert _denied(runtime, make_context(gpu_pod(gpus="6"))) == ["four-again: at most 4", "four: at most 4",
                                                                 "two: at most 2"]
    assert _denied(runtime, make_context(gpu_pod(gpus="1"))) == []


def test_params_as_a_local_name_and_comments_keep_their_meaning(
    runtime: PolicyRuntime, make_context: Callable[..., PolicyContext]
) -> None:
    shadowed = "object.spec.containers.all(params, params.name != 'forbidden')"
    commented = "params.max >= 3 // the table's entry must close after this comment"
    policies = [
        _limit("shadow", 1, shadowed),
        _limit("comment-low", 2, commented if runtime.cel_engine.name == "cel-expr-python" else "params.max >= 3"),
        _limit("comment-high", 5, commented if runtime.cel_engine.name == "cel-expr-python" else "params.max >= 3"),
    ]
    assert runtime.reload(builtin=False, gpu_policies=policies).ok
    assert _denied(runtime, make_context(gpu_pod(gpus="1"))) == ["comment-low: at most 2"]


@pytest.mark.parametrize("expression", [
    # `in .params.x`: the dot opens the root name (not a field of `in`), so it reads the policy's entry too.
    "'main' in .params.allowed",
    # ... also where the operand is one side of a `&&`.
    "object.spec.containers.size() > 0 && object.spec.containers.exists(c, c.name in .params.allowed)",
    # The root-scope `.params` is the policy's params even where a comprehension variable is named `params`
    # (cel-cpp's answer; celpy lets the local capture it).
    "object.spec.containers.all(params, params.name in .params.allowed)",
])
def test_the_root_scope_params_is_the_policys_own(make_context: Callable[..., PolicyContext], expression: str) -> None:
    runtime = build_runtime(failure_mode="closed")
    policies = [gpu_policy(name, "Deny", validations=[{"expression": expression, "message": name}],
                           params={"allowed": allowed}) for name, allowed in (("in", ["main"]), ("out", ["x"]))]
    assert runtime.reload(builtin=False, gpu_policies=policies).ok
    assert _denied(runtime, make_context(gpu_pod())) == ["out"]


def test_a_shared_expression_that_fails_is_reported_for_every_policy_stating_it(
    make_context: Callable[..., PolicyContext]
) -> None:
    runtime = build_runtime(failure_mode="closed")
    broken = "object.metadata.nope == 'x'"
    assert runtime.reload(builtin=False, gpu_policies=[_limit("a", 1, broken), _limit("b", 1, broken)]).ok
    violations = runtime.check(make_context(gpu_pod()))
    assert sorted(v.policy for v in violations) == ["a", "b"]
    assert all(v.action == "Deny" and "nope" in v.message for v in violations)


def test_the_params_table_is_not_a_variable_policy_authors_can_use() -> None:
    runtime = build_runtime(cel_engine="cel-expr-python")  # the engine with the table (celpy checks names late)
    sneaky = _limit("sneaky", 1, "size(kgwe__params) > 0")
    report = runtime.reload(builtin=False, gpu_policies=[sneaky])
    assert not report.ok
    assert "kgwe__params" in str(report.errors)


def test_shared_match_conditions_gate_each_policy(
    runtime: PolicyRuntime, make_context: Callable[..., PolicyContext]
) -> None:
    condition = [{"name": "big", "expression": "object.spec.containers.exists(c, "
                                              "int(c.resources.limits['nvidia.com/gpu']) > 2)"}]
    policies = [
        gpu_policy("gated-a", "Deny", validations=[{"expression": "false", "message": "a"}],
                   matchConditions=condition, params={"max": 1}),
        gpu_policy("gated-b", "Warn", validations=[{"expression": "false", "message": "b"}],
                   matchConditions=condition, params={"max": 2}),
    ]
    assert runtime.reload(builtin=False, gpu_policies=policies).ok
    assert runtime.check(make_context(gpu_pod(gpus="1"))) == []
    found = sorted(runtime.check(make_context(gpu_pod(gpus="4"))), key=lambda v: v.policy)
    assert found == [Violation("gated-a", "Deny", "a"), Violation("gated-b", "Warn", "b")]


# `request` is given without `object`/`oldObject` when no expression of the set can read them through it
# (the pod is converted once): every other way of reading `request` must still see the whole request.
WHOLE_REQUEST_READS = [
    "request.object.metadata.name == 'gpu-pod'",
    "has(request.object)",
    "request['object'].metadata.name == 'gpu-pod'",
    "'object' in request",
    "request.exists(k, k == 'object')",
    "cel.bind(r, request, has(r.object))",
]


@pytest.mark.parametrize("expression", WHOLE_REQUEST_READS)
def test_request_read_whole_still_holds_the_pod(
    runtime: PolicyRuntime, make_context: Callable[..., PolicyContext], expression: str
) -> None:
    if runtime.cel_engine.name == "cel-python" and expression.startswith("cel.bind"):
        pytest.skip("cel-python has no cel.bind")
    policies = [gpu_policy("whole", "Deny", validations=[{"expression": expression, "message": "no pod"}]),
                gpu_policy("user", "Deny", validations=[{"expression": "request.userInfo.username != ''",
                                                         "message": "no user"}])]
    assert runtime.reload(builtin=False, gpu_policies=policies).ok
    assert runtime._set.cel_reads_request_objects
    assert _denied(runtime, make_context(gpu_pod("gpu-pod"))) == []


def test_request_fields_beside_the_objects_read_alike_without_them(
    runtime: PolicyRuntime, make_context: Callable[..., PolicyContext]
) -> None:
    policies = [gpu_policy("fields", "Deny", validations=[
        {"expression": "request.operation == 'CREATE' && request.userInfo.username != '' && has(request.uid)",
         "message": "fields"},
        {"expression": "!has(request.dryRun) || !request.dryRun", "message": "dry run"},
        {"expression": "object.metadata.name == 'gpu-pod'", "message": "object"},
    ])]
    assert runtime.reload(builtin=False, gpu_policies=policies).ok
    assert not runtime._set.cel_reads_request_objects
    assert _denied(runtime, make_context(gpu_pod("gpu-pod"))) == []
    assert _denied(runtime, make_context(gpu_pod("other"))) == ["object"]
