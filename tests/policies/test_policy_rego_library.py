"""The built-in `rego/` test suite passes on every Rego engine KGWE supports."""

from __future__ import annotations

from pathlib import Path

import pytest
from opa_rest_stub import OpaRestStub

from policies.engines.rego import RegoEngine, RegorusEngine
from policies.engines.rego_opa import OpaGoEngine, OpaServerEngine, opa_go_available
from policies.runtime.testing import run, run_rego_tests
from rego import LIBRARY_DIR


def _assert_all_pass(engine: RegoEngine) -> None:
    results = run_rego_tests(engine, LIBRARY_DIR)
    assert len(results) >= 25
    failed = [(r.name, r.detail) for r in results if not r.passed]
    assert failed == []


def test_library_suite_on_embedded_engine() -> None:
    _assert_all_pass(RegorusEngine())


@pytest.mark.skipif(not opa_go_available(), reason="opa-golib-python-bindings (OPA's Go engine) is not installed")
def test_library_suite_on_opa_go_reference() -> None:
    _assert_all_pass(OpaGoEngine())


def test_library_suite_through_opa_client_against_rest_stub() -> None:
    # Real opa-python-client calls (policy API, data API, queries) against a stand-in server.
    with OpaRestStub() as stub:
        _assert_all_pass(OpaServerEngine(stub.url))
        assert stub.state.policy_puts >= 10
        assert any(key.startswith("kgwe/") for key in stub.state.modules)


def test_library_suite_on_real_opa_server(opa_server: str) -> None:
    _assert_all_pass(OpaServerEngine(opa_server))


def test_cli_reports_per_test_and_summary(capsys: pytest.CaptureFixture[str]) -> None:
    assert run([str(LIBRARY_DIR)]) == 0
    out = capsys.readouterr().out
    assert "PASS data.kgwe.admission.privileged_test.test_privileged_gpu_container_denied" in out
    assert "PASS: " in out.splitlines()[-1]


def test_cli_fails_on_a_failing_test(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "bad_test.rego").write_text(
        "package x_test\nimport rego.v1\ntest_ok if { true }\ntest_wrong if { 1 == 2 }\n"
    )
    assert run([str(tmp_path), "--no-builtin"]) == 1
    out = capsys.readouterr().out
    assert "PASS data.x_test.test_ok" in out
    assert "FAIL data.x_test.test_wrong" in out
    assert "FAIL: 1/2" in out


def test_cli_reports_compile_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "broken_test.rego").write_text("package y_test\nimport rego.v1\ntest_a if { input.x = }\n")
    assert run([str(tmp_path), "--no-builtin"]) == 1
    assert "compile error" in capsys.readouterr().out


def test_cli_runs_cel_cases_of_the_examples(capsys: pytest.CaptureFixture[str]) -> None:
    examples = Path(__file__).resolve().parents[2] / "examples" / "policies"
    assert run([str(examples)]) == 0
    assert "PASS examples.celtest.yaml:twelve GPUs are refused with the count in the message" in capsys.readouterr().out
