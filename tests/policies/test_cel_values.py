"""A CEL value holding an optional is an engine failure, under the failure mode, not a crash.

cel-expr-python 0.1.3 cannot convert optionals to Python: `check` raised TypeError past the failure mode
for a validation, match condition or message that evaluated to one, and reading a map holding one
crashed the process (policies/engines/cel_values.py).
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Callable
from typing import Any

import pytest
from policy_fixtures import ROOT, gpu_pod, gpu_policy

from policies.api import PolicyContext
from policies.runtime.policy_runtime import build_runtime

# Beside each, a policy that denies every pod named "p": the failing policy must not silence it.
OTHER = gpu_policy("named-p", validations=[{"expression": "object.metadata.name != 'p'", "message": "named p"}])

UNREADABLE_SPECS: list[dict[str, Any]] = [
    {"validations": [{"expression": "object.?metadata.?name", "message": "m"}]},
    {"validations": [{"expression": "[object.?metadata.?name] == []", "message": "m"}],
     "matchConditions": [{"name": "optional", "expression": "optional.none()"}]},
    {"validations": [{"expression": "dyn([object.?metadata.?name])", "message": "m"}]},
    # (a map holding one: test_a_map_holding_an_optional_does_not_crash_the_process, in its own process)
]


@pytest.mark.parametrize("spec", UNREADABLE_SPECS)
def test_fail_closed_names_the_failure(spec: dict[str, Any], make_context: Callable[..., PolicyContext]) -> None:
    runtime = build_runtime(failure_mode="closed")
    assert runtime.reload(builtin=False, gpu_policies=[gpu_policy("optional", **spec), OTHER]).ok
    violations = runtime.check(make_context(gpu_pod()))
    assert sorted((v.policy, v.action) for v in violations) == [("named-p", "Deny"), ("optional", "Deny")]
    [failed] = [v for v in violations if v.policy == "optional"]
    assert "the policy engine failed" in failed.message and "optional" in failed.message


@pytest.mark.parametrize("spec", UNREADABLE_SPECS)
def test_fail_open_skips_only_that_policy(spec: dict[str, Any], make_context: Callable[..., PolicyContext]) -> None:
    runtime = build_runtime(failure_mode="open")
    assert runtime.reload(builtin=False, gpu_policies=[gpu_policy("optional", **spec), OTHER]).ok
    # The failing policy only warns (marked failed: /validate refuses a GPU pod for it); the other answers.
    found = runtime.check(make_context(gpu_pod()))
    assert [(v.policy, v.action, v.failed) for v in found] == [("optional", "Warn", True), ("named-p", "Deny", False)]


def test_an_optional_message_falls_back_to_the_expression(make_context: Callable[..., PolicyContext]) -> None:
    runtime = build_runtime(failure_mode="closed")
    policy = gpu_policy("message", validations=[{"expression": "false", "messageExpression": "object.?metadata.?name"}])
    assert runtime.reload(builtin=False, gpu_policies=[policy]).ok
    assert [v.message for v in runtime.check(make_context(gpu_pod()))] == ["failed expression: false"]


def test_a_map_holding_an_optional_does_not_crash_the_process() -> None:
    # Unfixed, reading the value killed the interpreter (SIGSEGV): run where that cannot take pytest along.
    script = textwrap.dedent("""
        from policies.engines.cel import CelEvaluationError, build_cel_engine
        engine = build_cel_engine("cel-expr-python")
        for text in ("{'a': optional.none()}", "[dyn({'a': [optional.of(1)]})]", "{'a': object.?metadata.?name}"):
            try:
                engine.compile(text).evaluate(engine.activation({"object": {"metadata": {"name": "p"}}}))
            except CelEvaluationError as exc:
                print("refused:", "optional" in str(exc))
    """)
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split("\n")[:3] == ["refused: True"] * 3
