"""`python3 dev.py`'s set-up says what it does in a few lines of its own and keeps the installers' output in a
file; uv installs, pip where uv cannot; `dev.py test` still runs the checks (at once), then pytest, as CI
(.ci/run) calls it."""

from __future__ import annotations

import subprocess
import sys
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
    monkeypatch.setattr(dev, "UV_HOME", venv / "uv")
    monkeypatch.setattr(dev, "_runner_has_pip", lambda: True)
    return venv


def _fake_pip(fail_on: str | None = None, commands: list[list[str]] | None = None) -> Any:
    """subprocess.run for the installers: noise in the log, exit 1 for a command with an argument that is
    `fail_on` or contains it (a path's last part must be it: `uv` fails uv, not every command)."""
    def run(command: list[str], *, stdout: Any, **_kwargs: Any) -> subprocess.CompletedProcess[str]:
        if commands is not None:
            commands.append(list(command))
        stdout.write("\n".join(NOISE) + "\n")
        if fail_on and any(Path(part).name == fail_on or (len(fail_on) > 2 and fail_on in part) for part in command):
            stdout.write("ERROR: No matching distribution found for something\n")
            return subprocess.CompletedProcess(command, 1)
        if "--target" in command:  # pip installing uv beside the virtualenv
            uv = Path(command[command.index("--target") + 1]) / "bin" / "uv"
            uv.parent.mkdir(parents=True, exist_ok=True)
            uv.write_text("")
        return subprocess.CompletedProcess(command, 0)

    return run


def _tool(command: list[str]) -> str:
    """Which installer a command runs: `uv` (uv pip install) or `pip` (python -m pip install)."""
    return "uv" if Path(command[0]).name == "uv" else "pip"


def test_a_fresh_setup_says_a_few_lines_and_logs_pip(fresh: Path, monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    commands: list[list[str]] = []
    monkeypatch.setattr(dev.subprocess, "run", _fake_pip(commands=commands))
    dev.ensure_venv()
    lines = capsys.readouterr().out.splitlines()
    assert 3 <= len(lines) <= 6 and all(line.startswith("dev.py: ") for line in lines), lines
    assert str(fresh / "pip.log") in lines[0]  # where the installers' output goes, said before they run
    log = (fresh / "pip.log").read_text()
    assert log.count(NOISE[-1]) == 3  # uv itself, KGWE, the optional reference engine
    # The pip running dev.py installs uv beside .venv (no pip made inside it), uv installs KGWE into this
    # .venv's Python, then the reference engine without its deps.
    assert [_tool(c) for c in commands] == ["pip", "uv", "uv"] and commands[0][-1] == "uv"
    assert commands[0][0] == sys.executable and str(fresh / "uv") in commands[0]
    assert commands[1][-2:] == ["-e", f"{dev.ROOT}[test]"] and str(fresh / "bin" / "python") in commands[1]
    assert "--no-deps" in commands[2] and "opa-golib-python-bindings==0.4.4" in commands[2]
    assert (fresh / ".kgwe-installed").read_text() == dev._requirements_digest()
    dev.ensure_venv()  # installed and unchanged: silent
    assert capsys.readouterr().out == ""


def test_a_failed_install_shows_the_end_of_the_log_and_where_it_is(
        fresh: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    commands: list[list[str]] = []
    monkeypatch.setattr(dev.subprocess, "run", _fake_pip(fail_on="[test]", commands=commands))
    assert dev.main(["serve"]) == 1
    out = capsys.readouterr().out
    # uv failed: pip made in .venv, upgraded, failed.
    assert [_tool(c) for c in commands] == ["pip", "uv", "pip", "pip", "pip"]
    assert commands[2][1:] == ["-m", "ensurepip", "--upgrade"]
    assert "uv could not install it" in out
    assert "installing KGWE with its test tools (pip) failed (pip exit 1)" in out
    assert "ERROR: No matching distribution found for something" in out
    assert out.rstrip().endswith(f"dev.py: the whole log: {fresh / 'pip.log'}")
    assert len(out.splitlines()) < 40 and not (fresh / ".kgwe-installed").exists()


def test_without_uv_pip_installs_everything(fresh: Path, monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    commands: list[list[str]] = []
    monkeypatch.setattr(dev.subprocess, "run", _fake_pip(fail_on="uv", commands=commands))
    dev.ensure_venv()
    out = capsys.readouterr().out
    assert [_tool(c) for c in commands] == ["pip", "pip", "pip", "pip", "pip"], commands
    assert commands[1][1:] == ["-m", "ensurepip", "--upgrade"] and commands[2][-2:] == ["--upgrade", "pip"]
    assert commands[3][-2:] == ["-e", f"{dev.ROOT}[test]"]
    assert "--ignore-requires-python" in commands[4]  # pip's way past the engine's Python >= 3.14
    assert "uv could not install it" in out and len(out.splitlines()) <= 8 and "ERROR" not in out
    assert (fresh / ".kgwe-installed").read_text() == dev._requirements_digest()


def test_a_python_without_pip_makes_pip_in_the_virtualenv(fresh: Path, monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    commands: list[list[str]] = []
    monkeypatch.setattr(dev.subprocess, "run", _fake_pip(commands=commands))
    monkeypatch.setattr(dev, "_runner_has_pip", lambda: False)
    dev.ensure_venv()
    assert commands[0][1:] == ["-m", "ensurepip", "--upgrade"] and commands[0][0] == str(fresh / "bin" / "python")
    assert commands[2][-2:] == ["-e", f"{dev.ROOT}[test]"] and "uv could not install it" in capsys.readouterr().out


def test_uv_installed_before_is_used_again(fresh: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    commands: list[list[str]] = []
    monkeypatch.setattr(dev.subprocess, "run", _fake_pip(commands=commands))
    (fresh / "uv" / "bin").mkdir(parents=True)
    (fresh / "uv" / "bin" / "uv").write_text("")
    dev.ensure_venv()
    assert [_tool(c) for c in commands] == ["uv", "uv"]


def test_an_optional_step_that_fails_is_one_line(fresh: Path, monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(dev.subprocess, "run", _fake_pip(fail_on="opa-golib"))
    dev.ensure_venv()
    out = capsys.readouterr().out
    assert "Rego reference cases will be skipped" in out and "ERROR" not in out
    assert (fresh / ".kgwe-installed").exists()


_REAL_POPEN = subprocess.Popen


class _Children:
    """subprocess.Popen for dev.py's children. A check writes two lines and exits with its code (from `codes`)
    once it has been polled `after` times (at once by default); pytest and the warm-up collection are real
    processes standing in for them (`pytest_runs`: Python code), so that dev.py waits for and stops real ones."""

    def __init__(self, codes: dict[str, int] | None = None, after: int = 0, pytest_runs: str = "pass") -> None:
        self.codes, self.after, self.pytest_runs = codes or {}, after, pytest_runs
        self.started: list[list[str]] = []
        self.environments: list[dict[str, str]] = []
        self.pytest: Any = None

    def __call__(self, args: list[str], **kwargs: Any) -> Any:
        self.started.append(list(args))
        self.environments.append(kwargs["env"])
        if args[1:3] == ["-m", "pytest"]:
            stand_in = _REAL_POPEN([sys.executable, "-c", "pass" if "--collect-only" in args else self.pytest_runs],
                                   **kwargs)
            if "--collect-only" not in args:
                self.pytest = stand_in
            return stand_in
        return _FakeCheck(self, args, **kwargs)

    def names(self) -> list[str]:
        return ["collect" if "--collect-only" in a else "pytest" if a[1:3] == ["-m", "pytest"] else Path(a[0]).name
                for a in self.started]


class _FakeCheck:
    def __init__(self, children: _Children, args: list[str], **kwargs: Any) -> None:
        name = Path(args[0]).name
        self.code = children.codes.get(name, 0)
        self.polls_left = children.after
        kwargs["stdout"].write(f"{name} says a line\n{name}: {'broken' if self.code else 'all good'}\n".encode())

    def poll(self) -> int | None:
        if self.polls_left > 0:
            self.polls_left -= 1
            return None
        return self.code

    def wait(self) -> int:
        return self.code


def test_dev_py_test_runs_the_checks_beside_pytest_as_ci_calls_it(monkeypatch: pytest.MonkeyPatch,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    children = _Children()
    monkeypatch.setattr(dev, "ensure_venv", lambda: None)
    monkeypatch.setattr(dev, "_caches_cold", lambda: False)
    monkeypatch.setattr(dev.subprocess, "Popen", children)
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    monkeypatch.chdir(dev.ROOT)
    assert dev.main(["test", "--long", "tests/quotas"]) == 0
    assert children.names() == ["ruff", "mypy", "lint-imports", "pytest"]
    # A line per check that passed (its last), after pytest's output.
    assert capsys.readouterr().out.splitlines()[-3:] == [
        "dev.py test: ruff: ruff: all good", "dev.py test: mypy: mypy: all good",
        "dev.py test: lint-imports: lint-imports: all good"]
    # Every CPU (a file per worker), the first failure stops it, and what follows `test` goes to pytest.
    workers = str(dev.test_workers())
    assert children.started[3][1:] == ["-m", "pytest", "-q", "-x", "-n", workers, "--dist", "loadfile", "--long",
                                       "tests/quotas"]
    assert 1 <= int(workers) <= dev.MAX_TEST_WORKERS
    # Bytecode caches allowed: otherwise every worker and every `kgwe` a test starts compiles KGWE again.
    assert all("PYTHONDONTWRITEBYTECODE" not in env and "PATH" in env for env in children.environments)


def test_a_check_failed_before_the_tests_start_shows_its_output_and_no_test_runs(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    children = _Children({"mypy": 1})
    monkeypatch.setattr(dev, "ensure_venv", lambda: None)
    monkeypatch.setattr(dev, "_caches_cold", lambda: False)
    monkeypatch.setattr(dev.subprocess, "Popen", children)
    monkeypatch.chdir(dev.ROOT)
    assert dev.main(["test"]) == 1
    out = capsys.readouterr().out
    assert children.names() == ["ruff", "mypy", "lint-imports"]  # all three ran; pytest did not
    assert "dev.py test: mypy failed (exit 1):\nmypy says a line\nmypy: broken\n" in out
    assert "dev.py test: ruff: ruff: all good" in out and out.rstrip().endswith("fix the failed checks")


def test_a_check_that_fails_while_the_tests_run_stops_them(monkeypatch: pytest.MonkeyPatch,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    children = _Children({"lint-imports": 3}, after=5, pytest_runs="import time; time.sleep(120)")
    monkeypatch.setattr(dev, "ensure_venv", lambda: None)
    monkeypatch.setattr(dev, "_caches_cold", lambda: False)
    monkeypatch.setattr(dev.subprocess, "Popen", children)
    monkeypatch.chdir(dev.ROOT)
    assert dev.main(["test"]) == 3
    assert children.names() == ["ruff", "mypy", "lint-imports", "pytest"]
    assert children.pytest.poll() is not None, "pytest was stopped, not left running"
    out = capsys.readouterr().out
    assert "a check failed, so the tests were stopped" in out and "lint-imports failed (exit 3)" in out


def test_a_fresh_clone_collects_once_beside_the_checks_before_the_workers(monkeypatch: pytest.MonkeyPatch) -> None:
    children = _Children()
    monkeypatch.setattr(dev, "ensure_venv", lambda: None)
    monkeypatch.setattr(dev, "_caches_cold", lambda: True)
    monkeypatch.setattr(dev.subprocess, "Popen", children)
    monkeypatch.chdir(dev.ROOT)
    assert dev.main(["test"]) == 0
    assert children.names() == ["ruff", "mypy", "lint-imports", "collect", "pytest"]
    collect = children.started[3]
    assert collect[1:] == ["-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider"]  # every test folder
    assert "PYTHONDONTWRITEBYTECODE" not in children.environments[3]  # its point is the bytecode it writes
    monkeypatch.setattr(dev, "_caches_cold", lambda: False)
    warm = _Children()
    monkeypatch.setattr(dev.subprocess, "Popen", warm)
    assert dev.main(["test"]) == 0 and warm.names() == ["ruff", "mypy", "lint-imports", "pytest"]  # nothing to warm


def test_the_files_run_first_are_there() -> None:
    """tests/conftest.py's LONGEST_FIRST names files that exist: a file renamed would silently run late."""
    text = (dev.ROOT / "tests" / "conftest.py").read_text()
    start = text.index("LONGEST_FIRST = (")
    names = [part.split('"')[1] for part in text[start:text.index(")\n", start)].split(",") if '"' in part]
    assert len(names) >= 10 and all((dev.ROOT / name).is_file() for name in names), names
