"""Which rules of a Rego module KGWE gathers (policies/engines/rego_source.py).

A rule missed here is never enforced, so the reading errs towards finding too many: a false match only
gathers a rule that stays undefined.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from policy_fixtures import gpu_pod

from policies.api import PolicyContext
from policies.engines.rego_source import inspect_module
from policies.runtime.policy_runtime import build_runtime


@pytest.mark.parametrize(("rule", "kind"), [
    ('deny contains "x" if true', "deny"),
    ('  deny contains "x" if true', "deny"),
    ('\twarn contains "x" if true', "warn"),
    ('deny.named := "x"', "deny"),
    ('deny["x"] if true', "deny"),
    ('decision := {"profile": "1g.10gb"}', "decision"),
])
def test_gathered_rules(rule: str, kind: str) -> None:
    assert inspect_module(f"package admin.p\nimport rego.v1\n{rule}\n").rules == frozenset({kind})


@pytest.mark.parametrize("rule", [
    '  deny contains "indented" if input.request.object.metadata.labels.stop == "1"',
    '\tdeny contains "indented" if input.request.object.metadata.labels.stop == "1"',
])
def test_an_indented_admin_rule_is_enforced(
    make_context: Callable[..., PolicyContext], tmp_path: Path, rule: str
) -> None:
    (tmp_path / "indented.rego").write_text(f"package admin.indented\nimport rego.v1\n{rule}\n")
    runtime = build_runtime()
    assert runtime.reload(builtin=True, directories=[str(tmp_path)]).ok
    refused = runtime.evaluate(make_context(gpu_pod(labels={"stop": "1"})))[1]
    assert [(v.policy, v.action, v.message) for v in refused] == [("admin.indented", "Deny", "indented")]
    assert runtime.evaluate(make_context(gpu_pod()))[1] == []
