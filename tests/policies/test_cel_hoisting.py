"""Operands that policies of one template share, bound once in a joined evaluation
(policies/engines/cel_hoisting.py).

Hoisting may change what an evaluation costs, never what it answers: short-circuits that skipped a
failing operand, operands that fail for some pods only, and policies that differ only in params all
answer as the engine that runs each expression on its own does.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest
from policy_fixtures import comparing_runtime, gpu_pod, gpu_policy

from policies.api import PolicyContext
from policies.engines.cel_hoisting import hoist, params_free_operands

SUM = "object.spec.containers.map(c, int(c.resources.limits['nvidia.com/gpu'])).sum()"


@pytest.mark.parametrize(("expression", "operands"), [
    (f"{SUM} <= params.max", [SUM]),
    (f"params.max >= {SUM}", [SUM]),
    (f"{SUM} <= params.max && object.metadata.labels.all(k, k != 'x')",
     [SUM, "object.metadata.labels.all(k, k != 'x')"]),
    (f"!params.enabled || {SUM} > 2 // a comment", [f"{SUM} > 2"]),
    (f"!{SUM}.isEmpty() || params.x", [f"!{SUM}.isEmpty()"]),
    # Not split: a conditional at the top, params inside a call, operands that call nothing.
    (f"params.on ? {SUM} > 1 : true", []),
    (f"object.spec.containers.exists(c, c.name == params.name) && {SUM} > 0", [f"{SUM} > 0"]),
    ("object.metadata.namespace != params.namespace", []),
    # `params` as a field name is not the variable.
    (f"{SUM} <= object.params.max", [f"{SUM} <= object.params.max"]),
    ("'a' in object.metadata.labels.map(k, k) == params.x", ["object.metadata.labels.map(k, k)"]),
    # The root-scope `.params` is params too.
    (f"{SUM} <= .params.max", [SUM]),
    (f"size(.params.names) > 0 && {SUM} > 0", [f"{SUM} > 0"]),
    (f"{SUM} > 0 && [1].exists(x, 'a' in .params.names)", [f"{SUM} > 0"]),
])
def test_operands_free_of_params_are_found_at_the_top_level(expression: str, operands: list[str]) -> None:
    assert [expression[a:b] for a, b in params_free_operands(expression)] == operands


def test_only_operands_shared_by_two_expressions_are_hoisted() -> None:
    expressions = [f"{SUM} <= params.max", f"{SUM}  <=  params.max", "size(object.spec.volumes) < params.v", None,
                   f"params.min <= {SUM}"]
    bindings, rewritten = hoist(expressions)
    assert bindings == [("kgwe__hoisted0", SUM)]
    assert rewritten == ["kgwe__hoisted0 <= params.max", "kgwe__hoisted0  <=  params.max", None, None,
                         "params.min <= kgwe__hoisted0"]
    assert hoist([f"{SUM} <= params.max"]) == ([], [None])


GUARDED = "int(object.metadata.annotations['n'])"


def _template(enabled: bool, limit: int) -> dict[str, Any]:
    return gpu_policy(f"n-{enabled}-{limit}", "Deny", validations=[
        {"expression": f"!params.enabled || {GUARDED} <= params.limit", "message": "n too large"},
        {"expression": f"{SUM} <= params.limit", "message": "too many GPUs"},
        # The root-scope `.params` reads the policy's own params, as in Kubernetes.
        {"expression": f"{SUM} < .params.limit + 1", "message": "too many GPUs (root scope)"},
    ], params={"enabled": enabled, "limit": limit})


def _answers(engine: str, make_context: Callable[..., PolicyContext], pod: dict[str, Any]) -> list[tuple[str, ...]]:
    runtime = comparing_runtime(engine, failure_mode="closed")
    policies = [_template(enabled, limit) for enabled in (True, False) for limit in (1, 3, 8)]
    assert runtime.reload(builtin=False, gpu_policies=policies).ok
    # The engines word a failure differently: that it failed, and where, is the answer.
    return sorted((v.policy, v.action, re.sub(r'^(the policy engine failed: ".*?"): .*$', r"\1", v.message))
                  for v in runtime.check(make_context(pod)))


@pytest.mark.parametrize("annotation", ["2", "5", "x", None])
@pytest.mark.parametrize("gpus", ["1", "4"])
def test_template_policies_answer_as_one_by_one_whatever_the_shared_operand_does(
    make_context: Callable[..., PolicyContext], annotation: str | None, gpus: str
) -> None:
    pod = gpu_pod(gpus=gpus)
    if annotation is not None:
        pod["metadata"]["annotations"] = {"n": annotation}
    # cel-python evaluates every expression on its own; cel-expr-python joins and hoists.
    joined = _answers("cel-expr-python", make_context, pod)
    assert joined == _answers("cel-python", make_context, pod)
    disabled = [policy for policy, _, message in joined if policy.startswith("n-False") and message == "n too large"]
    assert disabled == []  # the short-circuit still skips the operand for disabled policies
