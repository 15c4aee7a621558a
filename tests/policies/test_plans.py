"""A request's steps are worked out once per policy set and matched groups, and remembered ones answer as
new ones do: the policies that run for each purpose."""

from __future__ import annotations

from collections.abc import Callable

from policy_fixtures import gpu_pod, gpu_policy

from policies.api import PolicyContext
from policies.loading import plans
from policies.runtime import build_runtime

GPU = "object.spec.containers.exists(c, 'nvidia.com/gpu' in c.?resources.?limits.orValue({}))"
REGO = """package kgwe.test.{name}

import rego.v1

{rule} contains "x" if {{ input.request.object.metadata.labels.never == "set" }}
"""
DECIDE = """package kgwe.test.{name}

import rego.v1

decision := {{}} if {{ input.request.object.metadata.labels.never == "set" }}
"""


def _policies() -> list[dict[str, object]]:
    at_most = {"expression": "object.spec.containers.size() <= 4", "message": "at most 4"}
    return [
        gpu_policy("cel-gpu", matchConditions=[{"name": "gpu", "expression": GPU}], validations=[at_most]),
        gpu_policy("cel-again", matchConditions=[{"name": "gpu", "expression": GPU}], validations=[at_most]),
        gpu_policy("rego-deny", rego={"module": REGO.format(name="deny", rule="deny")}),
        gpu_policy("rego-decide", rego={"module": DECIDE.format(name="decide")}),
        gpu_policy("deletes", match={"operations": ["DELETE"]}, validations=[at_most]),
    ]


def test_each_purpose_runs_its_policies(
    make_context: Callable[..., PolicyContext],
) -> None:
    runtime = build_runtime()
    assert runtime.reload(builtin=False, gpu_policies=_policies()).ok
    policy_set = runtime._set
    ctx = make_context(gpu_pod(gpus="1"))
    matched = tuple(rules.matches(ctx.request, ctx.namespace_object) for rules, _ in policy_set.match_groups)
    names = {purpose: [p.name for p in policy_set.plans.candidates(purpose, matched)]
             for purpose in ("check", "decide", "evaluate")}
    assert names == {"check": ["cel-gpu", "cel-again", "rego-deny"], "decide": ["rego-decide"],
                     "evaluate": ["cel-gpu", "cel-again", "rego-deny", "rego-decide"]}
    step = policy_set.plans.candidates("check", matched)
    assert policy_set.plans.candidates("check", matched) is step  # remembered


def _wide(pod: dict[str, object], containers: int) -> dict[str, object]:
    spec = dict(pod["spec"])  # type: ignore[call-overload]
    spec["containers"] = [{**spec["containers"][0], "name": f"c{i}"} for i in range(containers)]
    return {**pod, "spec": spec}


def test_steps_past_the_bound_answer_as_remembered_ones(make_context: Callable[..., PolicyContext]) -> None:
    remembered = build_runtime()
    unremembered = build_runtime()
    for runtime in (remembered, unremembered):
        assert runtime.reload(builtin=False, gpu_policies=_policies()).ok
    pods = [gpu_pod(gpus="1"), _wide(gpu_pod(gpus="1"), 5), gpu_pod(gpus="0", memory=None)]
    for pod in pods:
        expected = remembered.evaluate(make_context(pod))
        plans.MAX_REMEMBERED, kept = 0, plans.MAX_REMEMBERED
        try:
            got = unremembered.evaluate(make_context(pod))
        finally:
            plans.MAX_REMEMBERED = kept
        assert got == expected
    assert any(v.message == "at most 4" for v in remembered.evaluate(make_context(pods[1]))[1])
