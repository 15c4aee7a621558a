"""Recursive Rego rules stay off regorus' compiled VM (policies/engines/rego_cycles.py).

Reached by a request, mutual recursion overflows the RVM's stack and kills the process (regorus 0.13;
the interpreter fails the query instead). Behind an input condition no load-time probe meets it, so the
set must be refused by the RVM gate from its syntax tree alone. The end-to-end case runs in a child
process: if the gate let the set through, the crash would take the test runner with it.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from policies.engines.rego_cycles import rule_cycle

ROOT = Path(__file__).resolve().parents[2]
_V1 = "import rego.v1\n\n"


def _module(package: str, body: str, imports: str = "") -> str:
    return f"package {package}\n\n{_V1}{imports}{textwrap.dedent(body)}"


# name -> (modules, the rules on the cycle)
CYCLES: dict[str, tuple[dict[str, str], set[str]]] = {
    "mutual": ({"a.rego": _module("p", """
        a if b
        b if a
        deny contains "x" if { input.loop == "yes"; a }
        """)}, {"p.a", "p.b"}),
    "self": ({"a.rego": _module("p", 'a if { input.loop == "yes"; a }\n')}, {"p.a"}),
    "function": ({"a.rego": _module("p", 'f(x) := f(x) if input.loop == "yes"\n')}, {"p.f"}),
    "across-packages": ({
        "a.rego": _module("p", 'deny contains "x" if { input.loop == "yes"; data.q.b }\n'),
        "b.rego": _module("q", "b if count(data.p.deny) > 0\n"),
    }, {"p.deny", "q.b"}),
    "through-an-import": ({
        "a.rego": _module("p", 'deny contains "x" if q.b\n', imports="import data.q\n"),
        "b.rego": _module("q", "b if count(data.p.deny) > 0\n"),
    }, {"p.deny", "q.b"}),
    "own-package-document": ({"a.rego": _module("p", "size := count(data.p)\n")}, {"p.size"}),
    "ref-head": ({"a.rego": _module("p", "a.b := c\nc := a\n")}, {"p.a.b", "p.c"}),
    "through-the-aggregate": ({
        "a.rego": _module("p", 'deny contains "others" if count(data.kgwe.aggregate.check.deny) > 1\n'),
        "kgwe-aggregate.rego": _module("kgwe.aggregate", """
            deny["p"] := v if v := data.p.deny
            check := {"deny": deny}
            """),
    }, {"kgwe.aggregate.check", "kgwe.aggregate.deny.p", "p.deny"}),
}

ACYCLIC: dict[str, dict[str, str]] = {
    "a-rule-reads-another": {"a.rego": _module("p", """
        default allow := false
        allow if not deny["x"]
        deny contains "x" if input.bad
        """)},
    "siblings-under-one-ref-head": {"a.rego": _module("p", "a.b := 1\na.c := a.b\n")},
    "a-library-and-its-users": {
        "a.rego": _module("p", "deny contains msg if { some msg in lib.messages }\n", imports="import data.lib\n"),
        "lib.rego": _module("lib", 'messages contains "m" if input.x\nhelper(x) := x\n'),
    },
    "params-and-cluster-data": {"a.rego": _module("p", """
        deny contains "over" if input.intent.gpus > data.kgwe.params["x"].limit
        warn contains "small" if count(data.kgwe.cluster.nodes) < 2
        """)},
}


@pytest.mark.parametrize("name", sorted(CYCLES))
def test_a_cycle_is_found(name: str) -> None:
    modules, rules = CYCLES[name]
    cycle = rule_cycle(modules)
    assert cycle is not None and cycle[0] == cycle[-1]  # a path that comes back where it started
    assert set(cycle) == rules


@pytest.mark.parametrize("name", sorted(ACYCLIC))
def test_no_cycle_where_there_is_none(name: str) -> None:
    assert rule_cycle(ACYCLIC[name]) == []


def test_the_shipped_library_and_the_examples_have_no_cycle() -> None:
    modules = {str(path): path.read_text() for path in [*(ROOT / "rego").rglob("*.rego"),
                                                        *(ROOT / "examples").rglob("*.rego")]
               if not path.name.endswith("_test.rego")}
    assert len(modules) >= 8
    assert rule_cycle(modules) == []


def test_a_module_regorus_cannot_read_leaves_the_answer_unknown() -> None:
    assert rule_cycle({"a.rego": "package p\n\ndeny contains if {\n"}) is None


_CHILD = """
import json, sys
from policies.api import PolicyContext
from policies.engines.rego_rvm import rego_evaluator
from policies.runtime.policy_runtime import build_runtime

runtime = build_runtime(rego_vm="auto")
assert runtime.reload(builtin=True, directories=[sys.argv[1]]).ok
pod = {"apiVersion": "v1", "kind": "Pod",
       "metadata": {"name": "p", "namespace": "team-a", "labels": {"loop": "yes"}},
       "spec": {"containers": [{"name": "main", "image": "cuda",
                                "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}
context = PolicyContext(request={"uid": "u", "operation": "CREATE", "namespace": "team-a", "object": pod,
                                 "userInfo": {"username": "alice", "groups": []}},
                        namespace_object=None, cluster={}, intent={"gpus": 1})
_, violations = runtime.evaluate(context)
print(json.dumps({"evaluator": rego_evaluator(runtime._set.prepared),
                  "violations": [[v.policy, v.action] for v in violations]}))
"""


def test_a_recursion_behind_an_input_condition_is_answered_by_the_interpreter(tmp_path: Path) -> None:
    (tmp_path / "loop.rego").write_text(_module("admin.loop", """
        a if b
        b if a
        deny contains "looped" if {
            input.request.object.metadata.labels.loop == "yes"
            a
        }
        """))
    child = subprocess.run([sys.executable, "-c", _CHILD, str(tmp_path)], capture_output=True, text=True,
                           cwd=ROOT, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}, timeout=120)
    assert child.returncode == 0, child.stderr[-2000:]
    answer = json.loads(child.stdout.strip().splitlines()[-1])
    # The interpreter fails the recursive policy and failureMode open makes it a warning; the process
    # lives, and the other policies still answer (the built-in memory check warns about this pod).
    assert answer == {"evaluator": "interpreter",
                      "violations": [["admin.loop", "Warn"], ["kgwe.admission.memory_limit", "Warn"]]}
