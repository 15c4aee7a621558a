"""Hot reload: a policy that does not compile is refused with its error and the last good set keeps
serving; fixing it needs no restart."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from policy_fixtures import gpu_pod, gpu_policy
from prometheus_client import REGISTRY

from policies.api import PolicyContext, Violation
from policies.runtime.policy_runtime import PolicyRuntime

GOOD_MODULE = """package kgwe.policy.limit
import rego.v1
deny contains "no more than 2 GPUs" if {
    to_number(input.request.object.spec.containers[0].resources.limits["nvidia.com/gpu"]) > 2
}
"""
BROKEN_MODULE = "package kgwe.policy.limit\nimport rego.v1\ndeny contains msg if { msg := }\n"


def _load_errors(policy: str) -> float:
    return REGISTRY.get_sample_value("kgwe_policy_load_errors_total", {"policy": policy}) or 0.0


def test_broken_upload_keeps_last_good_version(runtime: PolicyRuntime, make_context: Callable[..., PolicyContext]
                                               ) -> None:
    good = gpu_policy("limit", rego={"module": GOOD_MODULE})
    assert runtime.reload(builtin=False, gpu_policies=[good]).ok
    before = _load_errors("limit")

    broken = gpu_policy("limit", rego={"module": BROKEN_MODULE})
    report = runtime.reload(builtin=False, gpu_policies=[broken])
    assert "limit" in report.errors and report.kept_previous == ["limit"]
    assert _load_errors("limit") == before + 1
    status = {s.name: s for s in runtime.status()}["limit"]
    assert status.loaded and status.error and "rego" in status.error

    # Still serving the good version.
    assert runtime.check(make_context(gpu_pod(gpus="4"))) == [Violation("limit", "Deny", "no more than 2 GPUs")]

    fixed = gpu_policy("limit", rego={"module": GOOD_MODULE.replace("> 2", "> 3")})
    assert runtime.reload(builtin=False, gpu_policies=[fixed]).ok
    assert runtime.check(make_context(gpu_pod(gpus="4"))) == [Violation("limit", "Deny", "no more than 2 GPUs")]
    assert runtime.check(make_context(gpu_pod(gpus="3"))) == []
    assert {s.name: s for s in runtime.status()}["limit"].error is None


def test_new_broken_policy_is_dropped_others_serve(runtime: PolicyRuntime, make_context: Callable[..., PolicyContext]
                                                  ) -> None:
    good = gpu_policy("good", validations=[{"expression": "false", "message": "always"}])
    bad_cel = gpu_policy("bad-cel", validations=[{"expression": "object.spec.containers.all(c, ", "message": "x"}])
    bad_action = gpu_policy("bad-action", "Block", validations=[{"expression": "true"}])
    report = runtime.reload(builtin=False, gpu_policies=[good, bad_cel, bad_action])
    assert set(report.errors) == {"bad-cel", "bad-action"}
    assert "spec.validations[0]" in report.errors["bad-cel"]
    assert "enforcementAction" in report.errors["bad-action"]
    statuses = {s.name: s for s in runtime.status()}
    assert statuses["good"].loaded and not statuses["bad-cel"].loaded
    assert runtime.check(make_context(gpu_pod())) == [Violation("good", "Deny", "always")]


def test_policies_that_conflict_together_keep_the_old_set(
    runtime: PolicyRuntime, make_context: Callable[..., PolicyContext]
) -> None:
    first = gpu_policy("first", rego={"module": GOOD_MODULE})
    assert runtime.reload(builtin=False, gpu_policies=[first]).ok
    # Same package as `first`: the two would merge their rules, so the newcomer is refused.
    second = gpu_policy("second", rego={"module": GOOD_MODULE.replace("no more than 2", "other")})
    report = runtime.reload(builtin=False, gpu_policies=[first, second])
    assert "already used by policy first" in report.errors["second"]
    assert runtime.check(make_context(gpu_pod(gpus="4"))) == [Violation("first", "Deny", "no more than 2 GPUs")]


def test_directory_rego_overrides_builtin_and_broken_file_is_reported(
    runtime: PolicyRuntime, make_context: Callable[..., PolicyContext], tmp_path: Path
) -> None:
    # An admin module with a built-in's package replaces it: here memory limits become a Deny.
    (tmp_path / "memory.rego").write_text(
        "package kgwe.admission.memory_limit\nimport rego.v1\nimport data.kgwe.lib.pod\n"
        "deny contains sprintf(\"%s: memory limit required\", [c.name]) if {\n"
        "  some c in pod.gpu_containers\n  not c.resources.limits.memory\n}\n"
    )
    (tmp_path / "broken.rego").write_text("package kgwe.admission.broken\nimport rego.v1\ndeny contains x if {\n")
    report = runtime.reload(directories=[str(tmp_path)])
    assert list(report.errors) == ["kgwe.admission.broken"]
    violations = runtime.check(make_context(gpu_pod(memory=None)))
    assert violations == [Violation("kgwe.admission.memory_limit", "Deny", "main: memory limit required")]


def test_unchanged_policies_are_not_recompiled(runtime: PolicyRuntime) -> None:
    policy = gpu_policy("same", validations=[{"expression": "true"}])
    runtime.reload(builtin=False, gpu_policies=[policy])
    first = runtime._set.gpu_policies[0]
    runtime.reload(builtin=False, gpu_policies=[policy])
    assert runtime._set.gpu_policies[0] is first


def test_repeated_reload_of_a_broken_policy_counts_once(runtime: PolicyRuntime) -> None:
    broken = gpu_policy("still-broken", rego={"module": BROKEN_MODULE.replace("limit", "still_broken")})
    runtime.reload(builtin=False, gpu_policies=[broken])
    count = _load_errors("still-broken")
    served = runtime._set
    for _ in range(3):
        report = runtime.reload(builtin=False, gpu_policies=[broken])
        assert "still-broken" in report.errors
    assert _load_errors("still-broken") == count
    assert runtime._set is served  # nothing changed: the prepared set is kept as it is
