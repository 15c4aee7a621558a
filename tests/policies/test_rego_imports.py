"""Imported `data` names written out in full for the compiled VM (policies/engines/rego_imports.py).

The rewrite is a text change the interpreter never sees, so it must mean what the text meant: names that
could be anything but the import are left as written, and every rewritten module answers as its original
on both evaluators.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from policy_fixtures import ROOT

from policies.engines.rego_imports import expanded_imports

HEAD = "package t\nimport rego.v1\nimport data.lib.pod\n"


@pytest.mark.parametrize(("body", "expected"), [
    ('deny contains c.name if { some c in pod.containers; c.privileged }',
     'deny contains c.name if { some c in data.lib.pod.containers; c.privileged }'),
    ('deny contains "x" if pod["gpu-count"] > 1', 'deny contains "x" if data.lib.pod["gpu-count"] > 1'),
    ('x := count(pod.containers) + count(pod.volumes)',
     'x := count(data.lib.pod.containers) + count(data.lib.pod.volumes)'),
    # Left as written: the name is (also) a local, an argument, an iteration, a rule head, itself alone.
    ('deny contains "x" if { some pod in input.pods; pod.name }', None),
    ('deny contains "x" if { pod := input.p; pod.name }', None),
    ('f(pod) := pod.name\ndeny contains "x" if pod.name', None),
    ('deny contains k if pod[k]', None),
    ('pod.extra := 1\ndeny contains "x" if pod.name', None),
    ('deny contains "x" if count(pod) > 1', None),
])
def test_only_names_that_can_only_mean_the_import_are_written_out(body: str, expected: str | None) -> None:
    assert expanded_imports("t.rego", HEAD + body) == HEAD + (expected if expected is not None else body)


def test_aliases_and_other_imports() -> None:
    source = ("package t\nimport rego.v1\nimport data.lib.pod as p\nimport input.request.object as obj\n"
              "deny contains \"x\" if { p.labels.team == obj.metadata.name }\n")
    assert expanded_imports("t.rego", source) == source.replace("p.labels", "data.lib.pod.labels")
    assert expanded_imports("t.rego", "package t\ndeny contains if {") == "package t\ndeny contains if {"
    plain = "package t\nimport rego.v1\nx := input.a\n"
    assert expanded_imports("t.rego", plain) == plain


def _modules() -> dict[str, str]:
    import sys

    sys.path.insert(0, str(ROOT / "bench"))
    from bench_policies import _TWENTY_REGO

    modules = {str(path): path.read_text() for path in sorted((ROOT / "rego").rglob("*.rego"))
               if not path.name.endswith("_test.rego")}
    modules["twenty.rego"] = _TWENTY_REGO.format(index=0).replace("input.params.", "data.params.")
    return modules


def _answers(modules: dict[str, str], document: dict[str, Any]) -> Any:
    import regorus

    engine = regorus.Engine()
    for name, source in modules.items():
        engine.add_policy(name, source)
    engine.add_data({"kgwe": {"cluster": {}}, "params": {"registry": "nvcr.io/", "maxContainers": 1}})
    engine.set_input(document)
    packages = sorted({line.split()[1] for source in modules.values() for line in source.splitlines()
                       if line.startswith("package ")})
    return {package: engine.eval_query_as_json(f"data.{package}") for package in packages}


def test_the_shipped_library_and_its_users_answer_as_written() -> None:
    modules = _modules()
    rewritten = {name: expanded_imports(name, source) for name, source in modules.items()}
    assert rewritten != modules  # the built-ins import the library: there is something to write out
    for path in sorted((ROOT / "examples" / "pods").glob("*.yaml")):
        import yaml

        for pod in (d for d in yaml.safe_load_all(path.read_text()) if isinstance(d, dict) and d.get("kind") == "Pod"):
            document = {"request": {"object": pod, "operation": "CREATE"}, "intent": {"gpus": 1},
                        "namespaceObject": None}
            assert json.dumps(_answers(rewritten, document), sort_keys=True) == json.dumps(
                _answers(modules, document), sort_keys=True), Path(path).name
