"""`kgwe policy test [DIR]`: run Rego unit tests (`*_test.rego`) and CEL test cases (`*.celtest.yaml`),
print PASS/FAIL per test and a summary, exit non-zero on any failure, like `opa test`.

Rego tests are rules named `test_*`; a test passes when its value is `true`. The modules of DIR are
loaded with the built-in library (unless `--no-builtin`), so admin tests can import `data.kgwe.lib.*`.
The CEL test-case format is documented in docs/policies.md.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from rego import LIBRARY_DIR

# The engines are imported where the tests run: `kgwe policy --help` and `kgwe policy test --help` read the
# parser alone (docs/performance.md, "The command line's start-up").
if TYPE_CHECKING:
    from policies.engines.cel import CelEngine
    from policies.engines.rego import PreparedRego, RegoEngine

CEL_TEST_SUFFIXES = (".celtest.yaml", ".celtest.yml")


@dataclass(frozen=True)
class TestResult:
    name: str
    passed: bool
    seconds: float
    detail: str = ""
    errored: bool = False


# -- Rego -------------------------------------------------------------------------------------


def _modules_in(directory: Path, prefix: str) -> dict[str, str]:
    return {f"{prefix}{p.relative_to(directory).as_posix()}": p.read_text(encoding="utf-8")
            for p in sorted(directory.rglob("*.rego"))}


def rego_modules(directory: Path, with_builtin: bool) -> dict[str, str]:
    modules = _modules_in(directory, "")
    library = LIBRARY_DIR.resolve()
    if with_builtin and directory.resolve() != library and library not in directory.resolve().parents:
        for name, source in _modules_in(library, "builtin:").items():
            if not name.endswith("_test.rego"):
                modules.setdefault(name, source)
    return modules


def rego_tests(modules: Mapping[str, str], only_files: set[str]) -> list[tuple[str, str]]:
    """(package, rule) of every `test_*` rule in the test files, in file order."""
    from policies.engines.rego_source import RegoSourceError, inspect_module

    found: list[tuple[str, str]] = []
    for name, source in modules.items():
        if name not in only_files:
            continue
        try:
            info = inspect_module(source)
        except RegoSourceError:
            continue
        found.extend((info.package, rule) for rule in info.tests)
    return found


def run_rego_tests(engine: RegoEngine, directory: Path, with_builtin: bool = True) -> list[TestResult]:
    from policies.engines.rego import UNDEFINED, RegoCompileError, RegoEvaluationError

    modules = rego_modules(directory, with_builtin)
    test_files = {name for name in modules if not name.startswith("builtin:")}
    tests = rego_tests(modules, test_files)
    if not tests:
        return []
    started = time.perf_counter()
    try:
        prepared: PreparedRego = engine.prepare(modules, {"kgwe": {"cluster": {}}})
    except RegoCompileError as exc:
        # One result, not one per test: the same compile error would repeat for every test.
        return [TestResult(f"{directory} ({len(tests)} tests)", False, time.perf_counter() - started,
                           f"compile error: {exc}", True)]
    results = []
    try:
        for package, rule in tests:
            name = f"data.{package}.{rule}"
            begun = time.perf_counter()
            try:
                value = prepared.query(name)
            except RegoEvaluationError as exc:
                results.append(TestResult(name, False, time.perf_counter() - begun, str(exc), True))
                continue
            detail = "" if value is True else ("undefined" if value is UNDEFINED else f"got {value!r}")
            results.append(TestResult(name, value is True, time.perf_counter() - begun, detail))
    finally:
        prepared.close()
    return results


# -- CEL --------------------------------------------------------------------------------------


def _cel_files(directory: Path) -> Iterator[Path]:
    for path in sorted(directory.rglob("*")):
        if path.name.endswith(CEL_TEST_SUFFIXES):
            yield path


def _expression_case(cel: CelEngine, case: Mapping[str, Any]) -> str:
    """'' when the case holds, else why not."""
    from policies.engines.cel import CelCompileError, CelEvaluationError

    variables = {k: case[k] for k in ("object", "oldObject", "request", "params", "namespaceObject") if k in case}
    expect = case.get("expect") or {}
    try:
        value = cel.compile(str(case["expression"])).evaluate(cel.activation(variables))
    except (CelCompileError, CelEvaluationError) as exc:
        wanted = expect.get("error")
        if wanted is not None and str(wanted) in str(exc):
            return ""
        return f"error: {exc}"
    if "error" in expect:
        return f"expected an error containing {expect['error']!r}, got {value!r}"
    if "value" in expect and value != expect["value"]:
        return f"expected {expect['value']!r}, got {value!r}"
    return ""


def _policy_case(policy: Mapping[str, Any], case: Mapping[str, Any], cel_engine: str) -> str:
    from policies.api import PolicyContext
    from policies.engines.rego import RegorusEngine
    from policies.runtime.policy_runtime import PolicyRuntime
    from policies.vocabulary.objects import ObjectView

    runtime = PolicyRuntime(RegorusEngine(), cel_engine=cel_engine)  # type: ignore[arg-type]
    spec = dict(policy.get("spec") or {})
    if "params" in case:
        spec["params"] = case["params"]
    # With the built-in library, which policies import; only this policy's violations are judged.
    report = runtime.reload(builtin=True, gpu_policies=[{**policy, "spec": spec}])
    if not report.ok:
        return f"policy does not compile: {report.errors}"
    obj = case.get("object") or {}
    request = {"operation": "CREATE", "namespace": ObjectView(obj).namespace or "default",
               "userInfo": {"username": "tester", "groups": []}, **(case.get("request") or {}), "object": obj}
    if "oldObject" in case:
        request["oldObject"] = case["oldObject"]
    ctx = PolicyContext(request=request, namespace_object=case.get("namespaceObject"),
                        cluster=case.get("cluster") or {}, intent=case.get("intent") or {})
    name = ObjectView(policy).name
    got = [{"action": v.action, "message": v.message} for v in runtime.check(ctx) if v.policy == name]
    expect = case.get("expect") or {}
    wanted = expect.get("violations", [])
    if len(got) != len(wanted):
        return f"expected {len(wanted)} violation(s), got {got}"
    for have, want in zip(got, wanted, strict=True):
        for key in ("action", "message"):
            if key in want and have[key] != want[key]:
                return f"expected {key} {want[key]!r}, got {have[key]!r}"
        if "messageContains" in want and str(want["messageContains"]) not in have["message"]:
            return f"expected a message containing {want['messageContains']!r}, got {have['message']!r}"
    return ""


def _load_policy(path: Path, suite: Mapping[str, Any]) -> Mapping[str, Any] | None:
    import yaml

    policy = suite.get("policy")
    if isinstance(policy, str):
        loaded = yaml.safe_load((path.parent / policy).read_text(encoding="utf-8"))
        return loaded if isinstance(loaded, dict) else None
    return policy if isinstance(policy, dict) else None


def run_cel_tests(directory: Path, cel_engine: str = "cel-expr-python") -> list[TestResult]:
    import yaml

    from policies.engines.cel import build_cel_engine

    cel = build_cel_engine(cel_engine)  # type: ignore[arg-type]
    results = []
    for path in _cel_files(directory):
        try:
            suite = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
            policy = _load_policy(path, suite)
        except (OSError, yaml.YAMLError) as exc:
            results.append(TestResult(str(path), False, 0.0, f"cannot read: {exc}", True))
            continue
        for index, case in enumerate(suite.get("cases") or []):
            if "engines" in case and cel_engine not in case["engines"]:
                continue  # a case that needs syntax only some engines have (e.g. optional `?.`)
            name = f"{path.name}:{case.get('name', index)}"
            begun = time.perf_counter()
            if "expression" in case:
                problem = _expression_case(cel, case)
            elif policy is not None:
                problem = _policy_case(policy, case, cel_engine)
            else:
                problem = "a case needs `expression`, or the suite a `policy`"
            results.append(TestResult(name, not problem, time.perf_counter() - begun, problem))
    return results


# -- command line -----------------------------------------------------------------------------


def _print(results: list[TestResult], verbose: bool, out: TextIO) -> None:
    for result in results:
        status = "PASS" if result.passed else ("ERROR" if result.errored else "FAIL")
        timing = f" ({result.seconds * 1000:.2f}ms)" if verbose else ""
        print(f"{status} {result.name}{timing}", file=out)
        if result.detail and (verbose or not result.passed):
            print(f"    {result.detail}", file=out)


def run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="kgwe policy test", description=__doc__.split("\n\n")[0])
    parser.add_argument("directory", nargs="?", default=str(LIBRARY_DIR),
                        help="policy directory (default: the built-in library)")
    parser.add_argument("-v", "--verbose", action="store_true", help="timings and details for every test")
    parser.add_argument("--engine", choices=("regorus", "opa-go", "opa"), default="regorus",
                        help="Rego engine (default: the embedded regorus)")
    parser.add_argument("--opa-url", help="OPA server for --engine opa, e.g. http://127.0.0.1:8181")
    parser.add_argument("--cel-engine", choices=("cel-expr-python", "cel-python"), default="cel-expr-python")
    parser.add_argument("--no-builtin", action="store_true", help="do not load the built-in library with DIR")
    args = parser.parse_args(argv)
    directory = Path(args.directory)
    if not directory.is_dir():
        print(f"kgwe policy test: {directory} is not a directory", file=sys.stderr)
        return 2
    from policies.engines.rego_opa import build_rego_engine

    try:
        engine = build_rego_engine(args.engine, args.opa_url)
    except ValueError as exc:
        print(f"kgwe policy test: {exc}", file=sys.stderr)
        return 2
    results = run_rego_tests(engine, directory, not args.no_builtin) + run_cel_tests(directory, args.cel_engine)
    _print(results, args.verbose, sys.stdout)
    passed = sum(r.passed for r in results)
    failed = [r for r in results if not r.passed and not r.errored]
    errored = [r for r in results if r.errored]
    print("-" * 80)
    if not results:
        print("no tests found")
        return 0
    print(f"PASS: {passed}/{len(results)}")
    if failed:
        print(f"FAIL: {len(failed)}/{len(results)}")
    if errored:
        print(f"ERROR: {len(errored)}/{len(results)}")
    return 0 if passed == len(results) else 1
