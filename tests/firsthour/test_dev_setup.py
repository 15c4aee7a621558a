"""`python3 dev.py`'s set-up says what it does in a few lines of its own and keeps pip's output in a file;
`dev.py test` still runs the checks, then pytest, as CI (.ci/run) calls it."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

import dev  # the repository root is on pytest's pythonpath

NOISE = [f"WARNING: something pip says on this machine, line {n}" for n in range(120)]


@pytest.fixture
def fresh(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A .venv that exists but has nothing installed: what the set-up does next is pip's."""
    venv = tmp_path / ".venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").write_text("")
    monkeypatch.setattr(dev, "VENV", venv)
    monkeypatch.setattr(dev, "PY", venv / "bin" / "python")
    monkeypatch.setattr(dev, "STAMP", venv / ".kgwe-installed")
    monkeypatch.setattr(dev, "PIP_LOG", venv / "pip.log")
    return venv


def _fake_pip(fail_on: str | None = None) -> Any:
    def run(command: list[str], *, stdout: Any, **_kwargs: Any) -> subprocess.CompletedProcess[str]:
        stdout.write("\n".join(NOISE) + "\n")
        if fail_on and any(fail_on in part for part in command):
            stdout.write("ERROR: No matching distribution found for something\n")
            return subprocess.CompletedProcess(command, 1)
        return subprocess.CompletedProcess(command, 0)

    return run


def test_a_fresh_setup_says_a_few_lines_and_logs_pip(fresh: Path, monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(dev.subprocess, "run", _fake_pip())
    dev.ensure_venv()
    lines = capsys.readouterr().out.splitlines()
    assert 3 <= len(lines) <= 6 and all(line.startswith("dev.py: ") for line in lines), lines
    assert str(fresh / "pip.log") in lines[0]  # where pip's output goes, said before it runs
    log = (fresh / "pip.log").read_text()
    assert log.count(NOISE[-1]) == 3  # pip itself, KGWE, the optional reference engine
    assert (fresh / ".kgwe-installed").read_text() == dev._requirements_digest()
    dev.ensure_venv()  # installed and unchanged: silent
    assert capsys.readouterr().out == ""


def test_a_failed_install_shows_the_end_of_the_log_and_where_it_is(
        fresh: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(dev.subprocess, "run", _fake_pip(fail_on="[test]"))
    assert dev.main(["serve"]) == 1
    out = capsys.readouterr().out
    assert "installing KGWE with its test tools failed (pip exit 1)" in out
    assert "ERROR: No matching distribution found for something" in out
    assert out.rstrip().endswith(f"dev.py: the whole log: {fresh / 'pip.log'}")
    assert len(out.splitlines()) < 40 and not (fresh / ".kgwe-installed").exists()


def test_an_optional_step_that_fails_is_one_line(fresh: Path, monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(dev.subprocess, "run", _fake_pip(fail_on="opa-golib"))
    dev.ensure_venv()
    out = capsys.readouterr().out
    assert "Rego reference cases will be skipped" in out and "ERROR" not in out
    assert (fresh / ".kgwe-installed").exists()


def test_dev_py_test_runs_the_checks_then_pytest_as_ci_calls_it(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[list[str]] = []
    environments: list[dict[str, str]] = []

    def call(args: list[str], **kwargs: Any) -> int:
        calls.append(list(args))
        environments.append(kwargs["env"])
        return 0

    monkeypatch.setattr(dev, "ensure_venv", lambda: None)
    monkeypatch.setattr(dev.subprocess, "call", call)
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    monkeypatch.chdir(dev.ROOT)
    assert dev.main(["test", "--long", "tests/quotas"]) == 0
    assert [Path(c[0]).name for c in calls[:3]] == ["ruff", "mypy", "lint-imports"]
    # Every CPU (a file per worker), the first failure stops it, and what follows `test` goes to pytest.
    workers = str(dev.test_workers())
    assert calls[3][1:] == ["-m", "pytest", "-q", "-x", "-n", workers, "--dist", "loadfile", "--long", "tests/quotas"]
    assert 1 <= int(workers) <= dev.MAX_TEST_WORKERS
    # Bytecode caches allowed: otherwise every worker and every `kgwe` a test starts compiles KGWE again.
    assert all("PYTHONDONTWRITEBYTECODE" not in env and "PATH" in env for env in environments)
