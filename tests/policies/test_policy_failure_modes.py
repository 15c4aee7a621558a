"""Engine errors: fail open (no violation, a log line, a metric) or closed (a Deny naming the failure)."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from policy_fixtures import gpu_pod, gpu_policy
from prometheus_client import REGISTRY

from policies.api import PolicyContext
from policies.runtime.policy_runtime import build_runtime

REGO_BOOM = gpu_policy("rego-boom", rego={"module": (
    "package kgwe.policy.boom\nimport rego.v1\n"
    'deny contains "big" if { to_number(input.request.object.metadata.labels.n) > 1 }\n')})
CEL_BOOM = gpu_policy("cel-boom", validations=[{"expression": "object.metadata.labels.n == 'NaN?'", "message": "m"}])


def _engine_errors(engine: str) -> float:
    return REGISTRY.get_sample_value("kgwe_policy_engine_errors_total", {"engine": engine}) or 0.0


def test_fail_open(make_context: Callable[..., PolicyContext], caplog: pytest.LogCaptureFixture) -> None:
    runtime = build_runtime(failure_mode="open")
    assert runtime.reload(builtin=False, gpu_policies=[REGO_BOOM, CEL_BOOM]).ok
    rego_before, cel_before = _engine_errors("regorus"), _engine_errors("cel-expr-python")
    # Open: a warning, marked `failed` (/validate still refuses a GPU pod for it).
    assert [(v.policy, v.action, v.failed) for v in runtime.check(make_context(gpu_pod(labels={"n": "NaN?"})))] \
        == [("rego-boom", "Warn", True)]
    assert _engine_errors("regorus") == rego_before + 1
    # No label `n` at all: CEL's map lookup fails.
    assert [(v.policy, v.action, v.failed) for v in runtime.check(make_context(gpu_pod()))] \
        == [("cel-boom", "Warn", True)]
    assert _engine_errors("cel-expr-python") >= cel_before + 1
    assert "policy engine" in caplog.text


def test_fail_closed(make_context: Callable[..., PolicyContext]) -> None:
    runtime = build_runtime(failure_mode="closed")
    assert runtime.reload(builtin=False, gpu_policies=[REGO_BOOM, CEL_BOOM]).ok
    violations = runtime.check(make_context(gpu_pod()))
    assert [(v.policy, v.action) for v in violations] == [("cel-boom", "Deny")]
    assert "the policy engine failed" in violations[0].message
    violations = runtime.check(make_context(gpu_pod(labels={"n": "NaN?"})))
    assert ("rego-boom", "Deny") in [(v.policy, v.action) for v in violations]


REGO_TEAM = gpu_policy("rego-team", rego={"module": (
    "package kgwe.policy.team\nimport rego.v1\n"
    'deny contains "team blocked" if input.request.object.metadata.labels.team == "blocked"\n')})


@pytest.mark.parametrize("mode", ["open", "closed"])
@pytest.mark.parametrize("builtin", [False, True])
def test_a_policy_made_to_fail_does_not_silence_the_others(
    make_context: Callable[..., PolicyContext], mode: str, builtin: bool
) -> None:
    # The pod's creator picks the label value that makes `rego-boom` fail on the engine; `rego-team`,
    # answered in the same query, still refuses the pod (failing open skips only the failing policy).
    runtime = build_runtime(failure_mode=mode)  # type: ignore[arg-type]
    assert runtime.reload(builtin=builtin, gpu_policies=[REGO_BOOM, REGO_TEAM]).ok
    ctx = make_context(gpu_pod(labels={"n": "NaN?", "team": "blocked"}))
    before = _engine_errors("regorus")
    for violations in (runtime.check(ctx), runtime.evaluate(ctx)[1]):
        found = [(v.policy, v.action) for v in violations]
        assert ("rego-team", "Deny") in found
        assert ("rego-boom", "Deny" if mode == "closed" else "Warn") in found
    assert _engine_errors("regorus") >= before + 2
    # Not remembered: the next replica is evaluated again, and still refused.
    assert ("rego-team", "Deny") in [(v.policy, v.action) for v in runtime.evaluate(ctx)[1]]
    if mode == "open":
        assert runtime.decide_placement(ctx) is not None


def test_cel_time_limit(make_context: Callable[..., PolicyContext]) -> None:
    runtime = build_runtime(failure_mode="closed")
    runtime.cel_time_limit = 0.0  # every evaluation is over the limit
    slow = gpu_policy("slow", validations=[{"expression": "true"}])
    assert runtime.reload(builtin=False, gpu_policies=[slow]).ok
    [violation] = runtime.check(make_context(gpu_pod()))
    assert "time limit" in violation.message


def test_cel_time_limit_reads_the_cpu_clock_once_and_stays_exact() -> None:
    """The CPU used since the request's first evaluation bounds one evaluation's from above, and that
    minus the wall time before it began from below: within the bounds the answer is exact; between them
    the evaluation is timed again on its own."""
    from policies.engines.cel import build_cel_engine
    from policies.runtime.cel_phase import cpu_over

    engine = build_cel_engine()
    program = engine.compile("[1, 2, 3].all(x, x > 0)")
    activation = engine.activation({})
    cpu, wall = time.thread_time(), time.perf_counter()
    # Little CPU since the clocks were read: under any limit above it.
    assert not cpu_over(1.0, (cpu, wall), wall, program, activation)
    # Ten seconds of CPU since the clocks, none of it before this evaluation began: over the limit.
    assert cpu_over(1.0, (cpu - 10.0, wall), wall, program, activation)
    # Ten seconds of CPU, but twenty of wall time before the evaluation began: it may have used none of
    # them, so it is timed alone, and a cheap expression is well under a second.
    assert not cpu_over(1.0, (cpu - 10.0, wall - 20.0), wall, program, activation)


def test_a_value_python_cannot_hold_is_a_policy_failure_not_a_crash(
    make_context: Callable[..., PolicyContext]
) -> None:
    # An optional as the value of a check (the binding cannot hand it to Python): the policy fails, alone.
    runtime = build_runtime(failure_mode="closed")
    policies = [
        gpu_policy("optional", validations=[{"expression": "object.?metadata.?labels"}]),
        gpu_policy("fine", validations=[{"expression": "false", "message": "refused"}]),
    ]
    assert runtime.reload(builtin=False, gpu_policies=policies).ok
    violations = {v.policy: v.message for v in runtime.check(make_context(gpu_pod()))}
    assert violations["fine"] == "refused"
    assert "optional" in violations["optional"]
