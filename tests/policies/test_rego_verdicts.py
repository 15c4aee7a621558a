"""A unit's Rego is compiled with the libraries it imports before it joins a set; what that concluded is
remembered by exactly what was compiled (policies/loading/rego_verdicts.py). A runtime built again from the
same sources gets the same answers and the same refusals; a change to the unit or to a library it imports is
compiled anew."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from policy_fixtures import gpu_pod

from policies.api import PolicyContext, Violation
from policies.loading.rego_verdicts import RegoVerdicts
from policies.runtime.policy_runtime import build_runtime

LIBRARY = """package kgwe.lib.limits
import rego.v1
too_many(n) if n > 2
"""
POLICY = """package kgwe.policy.limit
import rego.v1
import data.kgwe.lib.limits
deny contains "no more than 2 GPUs" if {
    limits.too_many(to_number(input.request.object.spec.containers[0].resources.limits["nvidia.com/gpu"]))
}
"""
DENIED = Violation("kgwe.policy.limit", "Deny", "no more than 2 GPUs")
BROKEN = "package kgwe.policy.broken\nimport rego.v1\ndeny contains msg if { msg := }\n"


def _directory(tmp_path: Path, **files: str) -> str:
    tmp_path.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (tmp_path / f"{name}.rego").write_text(text)
    return str(tmp_path)


def test_a_runtime_built_again_answers_and_refuses_as_the_first(
        tmp_path: Path, make_context: Callable[..., PolicyContext]) -> None:
    directory = _directory(tmp_path, lib=LIBRARY, limit=POLICY, broken=BROKEN)
    reports = []
    for _ in range(2):
        runtime = build_runtime()
        reports.append(runtime.reload(builtin=False, directories=[directory]))
        assert runtime.check(make_context(gpu_pod(gpus="4"))) == [DENIED]
        assert runtime.check(make_context(gpu_pod(gpus="2"))) == []
    first, again = reports
    assert set(first.errors) == {"kgwe.policy.broken"} and "rego" in first.errors["kgwe.policy.broken"]
    assert again.errors == first.errors


def test_a_policy_is_compiled_again_when_a_library_it_imports_changes(tmp_path: Path) -> None:
    good = _directory(tmp_path / "good", lib=LIBRARY, limit=POLICY)
    assert build_runtime().reload(builtin=False, directories=[good]).ok
    # The same policy text; the library no longer defines the function it calls: refused, not remembered as good.
    changed = _directory(tmp_path / "changed", lib=LIBRARY.replace("too_many(n)", "too_few(n)"), limit=POLICY)
    report = build_runtime().reload(builtin=False, directories=[changed])
    assert "kgwe.policy.limit" in report.errors and "too_many" in report.errors["kgwe.policy.limit"]
    assert build_runtime().reload(builtin=False, directories=[good]).ok


def test_the_verdicts_kept_are_bounded_and_the_latest_used_stay() -> None:
    verdicts = RegoVerdicts(size=2)
    keys = [RegoVerdicts.key("regorus", {"m.rego": f"package p{n}"}, {}, None) for n in range(3)]
    assert len(set(keys)) == 3
    verdicts.put(keys[0], "")
    verdicts.put(keys[1], "rego: refused")
    assert verdicts.get(keys[0]) == ""  # used last: kept over keys[1]
    verdicts.put(keys[2], "")
    assert verdicts.get(keys[1]) is None and verdicts.get(keys[0]) == "" and verdicts.get(keys[2]) == ""
