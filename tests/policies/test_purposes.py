"""Which GPUPolicies run for each purpose (`/validate`'s checks, `/mutate`'s decision, both) and match the
request: only they reach an engine."""

from __future__ import annotations

from collections.abc import Callable

from policy_fixtures import gpu_pod, gpu_policy

from policies.api import PolicyContext
from policies.runtime.cel_phase import CelScope
from policies.runtime.policy_runtime import build_runtime

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


def test_each_purpose_runs_its_matching_policies(make_context: Callable[..., PolicyContext]) -> None:
    runtime = build_runtime()
    assert runtime.reload(builtin=False, gpu_policies=_policies()).ok
    policy_set = runtime._set
    ctx = make_context(gpu_pod(gpus="1"))
    names = {purpose: [p.name for p in runtime._active(policy_set, ctx, purpose, [], CelScope(policy_set))]
             for purpose in ("check", "decide", "evaluate")}
    assert names == {"check": ["cel-gpu", "cel-again", "rego-deny"], "decide": ["rego-decide"],
                     "evaluate": ["cel-gpu", "cel-again", "rego-deny", "rego-decide"]}
