"""Conformance runner: the same Rego and CEL cases against every engine, answers compared with the
reference (OPA's for Rego, recorded in the cases; cel-go's for CEL, written in the cases).

Used by the tests (supported engines must pass, or name their known divergence) and by
`bench/bench_policies.py`, whose counts are quoted in docs/decisions.md.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from policies.engines.cel import CEL_VARIABLES, CelCompileError, CelEvaluationError, build_cel_engine
from policies.engines.rego import UNDEFINED, RegoCompileError, RegoEvaluationError, RegoInput
from policies.engines.rego_opa import build_rego_engine


@dataclass(frozen=True)
class CaseResult:
    name: str
    agrees: bool
    got: Any
    expected: Any


def load_cases(path: Path) -> list[dict[str, Any]]:
    return list((yaml.safe_load(path.read_text(encoding="utf-8")) or {}).get("cases") or [])


def _same(got: Any, expected: Any) -> bool:
    """JSON equality where 8 and 8.0 are the same number, as both OPA and CEL treat them."""
    if isinstance(got, bool) or isinstance(expected, bool):
        return got is expected if isinstance(got, bool) and isinstance(expected, bool) else False
    if isinstance(got, int | float) and isinstance(expected, int | float):
        return math.isclose(got, expected, rel_tol=1e-12, abs_tol=0.0)
    if isinstance(got, list | tuple) and isinstance(expected, list | tuple):
        return len(got) == len(expected) and all(_same(a, b) for a, b in zip(got, expected, strict=True))
    if isinstance(got, dict) and isinstance(expected, dict):
        return got.keys() == expected.keys() and all(_same(got[k], expected[k]) for k in got)
    return bool(got == expected)


def _judge(name: str, outcome: Mapping[str, Any], expect: Mapping[str, Any]) -> CaseResult:
    if expect.get("error"):
        return CaseResult(name, "error" in outcome, outcome, expect)
    if expect.get("undefined"):
        return CaseResult(name, outcome.get("undefined") is True, outcome, expect)
    agrees = "value" in outcome and _same(outcome["value"], expect.get("value"))
    return CaseResult(name, agrees, outcome, expect)


RegoRunner = Callable[[str, Mapping[str, Any]], Mapping[str, Any]]


def supported_rego_runner(engine_name: str, opa_url: str | None = None) -> RegoRunner:
    engine = build_rego_engine(engine_name, opa_url)  # type: ignore[arg-type]

    def run(module: str, rego_input: Mapping[str, Any]) -> Mapping[str, Any]:
        try:
            prepared = engine.prepare({"c.rego": module}, {})
        except RegoCompileError as exc:
            return {"error": str(exc)}
        try:
            value = prepared.query("data.c.x", RegoInput(dict(rego_input)))
        except RegoEvaluationError as exc:
            return {"error": str(exc)}
        finally:
            prepared.close()
        return {"undefined": True} if value is UNDEFINED else {"value": value}

    return run


def hobofan_regorus_runner() -> RegoRunner:
    """The 2024 regorus build, measured for the engine decision only (not a supported engine)."""
    import json

    import hobofan_regorus

    def run(module: str, rego_input: Mapping[str, Any]) -> Mapping[str, Any]:
        engine = hobofan_regorus.Engine()
        try:
            engine.add_policy("c.rego", module)
            engine.set_input_json(json.dumps(rego_input))
            rows = json.loads(engine.eval_query_as_json("data.c.x")).get("result") or []
        except Exception as exc:
            return {"error": str(exc).split("Stack backtrace")[0]}
        return {"value": rows[0]["expressions"][0]["value"]} if rows else {"undefined": True}

    return run


def regorus_rvm_runner() -> RegoRunner:
    """regorus' compiled VM (RVM), measured for the engine decision only: no `with`, `walk` or `print`
    yet, and evaluation errors come back as undefined instead of failing the query."""
    import json

    import regorus

    def run(module: str, rego_input: Mapping[str, Any]) -> Mapping[str, Any]:
        try:
            program = regorus.Program.compile_from_modules("{}", [("c.rego", module)], ["data.c.x"])
            vm = regorus.Rvm()
            vm.load_program(program)
            vm.set_data_json("{}")
            vm.set_input_json(json.dumps(rego_input))
            raw = vm.execute_entry_point("data.c.x")
        except Exception as exc:
            return {"error": str(exc).split("Stack backtrace")[0]}
        value = json.loads(raw)
        return {"undefined": True} if value == "<undefined>" else {"value": value}

    return run


def served_vm_runner(served: list[str] | None = None) -> RegoRunner:
    """The embedded engine as the runtime uses it (`RegorusVmEngine`: the RVM where its gates hold, else the
    interpreter). Each case's `x` becomes a warning of a one-policy set, so it travels through the aggregate
    query the runtime asks, with the case's input under an admission request. `served` collects the
    modules the RVM served."""
    from policies.engines.aggregate import AGGREGATE_MODULE, CHECK_QUERY, GatheredPolicy, aggregate_module
    from policies.engines.rego_rvm import RegorusVmEngine, rego_evaluator

    engine = RegorusVmEngine("auto")
    wrapper = "package kgwe_conformance_w\nimport rego.v1\nwarn contains v if { v := data.c.x }\n"
    aggregate = aggregate_module([GatheredPolicy("w", "kgwe_conformance_w", frozenset({"warn"}), gated=False)])

    def run(module: str, rego_input: Mapping[str, Any]) -> Mapping[str, Any]:
        modules = {"c.rego": module, "w.rego": wrapper, AGGREGATE_MODULE: aggregate}
        try:
            prepared = engine.prepare(modules, {})
        except RegoCompileError as exc:
            return {"error": str(exc)}
        try:
            if served is not None and rego_evaluator(prepared) == "rvm":
                served.append(module)
            document = {"request": {"object": {"spec": {}}}, **dict(rego_input)}
            warn = prepared.query(CHECK_QUERY, RegoInput(document))["warn"]["w"]
        except RegoEvaluationError as exc:
            return {"error": str(exc)}
        finally:
            prepared.close()
        return {"value": warn[0]} if warn else {"undefined": True}

    return run


def run_rego_cases(cases: list[dict[str, Any]], runner: RegoRunner) -> list[CaseResult]:
    return [_judge(c["name"], runner(c["module"], c.get("input") or {}), c["expect"]) for c in cases]


def run_cel_cases(cases: list[dict[str, Any]], engine_name: str) -> list[CaseResult]:
    engine = build_cel_engine(engine_name)  # type: ignore[arg-type]
    results = []
    for case in cases:
        variables: dict[str, Any] = {k: case[k] for k in CEL_VARIABLES if k in case}
        try:
            program = engine.compile(case["expression"])
            outcome: dict[str, Any] = {"value": program.evaluate(engine.activation(variables))}
        except (CelCompileError, CelEvaluationError) as exc:
            outcome = {"error": str(exc)}
        results.append(_judge(case["name"], outcome, case["expect"]))
    return results
