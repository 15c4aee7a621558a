#!/usr/bin/env python3
"""Set-up entry points for a fresh machine that has only Python.

    python3 dev.py serve   # webhook on https://127.0.0.1:8443 against examples/cluster (--host 0.0.0.0 to share)
    python3 dev.py test    # ruff, mypy, lint-imports beside the test suite on every CPU (stops at the first failure)
    python3 dev.py test --long   # the same, with the long fuzz hunts and soaks (tests marked slow)

Arguments after `test` go to pytest: `python3 dev.py test tests/quotas -n 0` runs one folder in one process.

Each creates `.venv` (if missing), installs KGWE and what it needs into it, then runs.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import os
import signal
import subprocess
import sys
import tempfile
import time
import venv
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
BIN = VENV / ("Scripts" if os.name == "nt" else "bin")
PY = BIN / "python"
STAMP = VENV / ".kgwe-installed"
# The installers' whole output: a hundred lines of warnings on some machines, none of which a first run needs
# to read.
PIP_LOG = VENV / "pip.log"
# uv, the installer dev.py uses (pip where uv cannot be had), lives here, outside the virtualenv's own packages.
UV_HOME = VENV / "uv"
# Lines of that log shown when an install fails: its error is at the end.
FAILURE_TAIL = 25
# OPA's own engine, the reference of the Rego conformance suite. Every release declares Python >= 3.14 but
# works on 3.11; the tests skip the reference cases when it is missing.
# uv has no --ignore-requires-python: it resolves for 3.14 instead (the wheel is py3-none, so it installs alike).
OPA_REFERENCE = "opa-golib-python-bindings==0.4.4"


class SetupError(Exception):
    """The set-up failed; the message says what and where the log is."""


def say(message: str) -> None:
    print(f"dev.py: {message}", flush=True)


def _requirements_digest() -> str:
    return hashlib.sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest()


def _install(step: str, command: list[str], *, required: bool = True) -> bool:
    """Run an installer's COMMAND with its output appended to PIP_LOG; say the step in one line. A required
    step that fails raises SetupError with the log's last lines; an optional one returns False."""
    say(step)
    tool = "uv" if Path(command[0]).name == "uv" else "pip"
    with PIP_LOG.open("a", encoding="utf-8") as log:
        log.write(f"\n=== {step}: {' '.join(command)}\n")
        log.flush()
        code = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL).returncode
    if code == 0:
        return True
    if not required:
        return False
    tail = PIP_LOG.read_text(encoding="utf-8", errors="replace").splitlines()[-FAILURE_TAIL:]
    raise SetupError("\n".join([f"{step} failed ({tool} exit {code}); the end of its log:", *tail,
                                f"dev.py: the whole log: {PIP_LOG}"]))


def _pip(args: list[str]) -> list[str]:
    return [str(PY), "-m", "pip", "install", "--disable-pip-version-check", "--progress-bar", "off", *args]


def _uv(uv: Path, args: list[str]) -> list[str]:
    return [str(uv), "pip", "install", "--python", str(PY), *args]


def _installed_uv() -> Path | None:
    for path in (UV_HOME / "bin" / "uv", UV_HOME / "bin" / "uv.exe", UV_HOME / "Scripts" / "uv.exe"):
        if path.exists():
            return path
    return None


def _runner_has_pip() -> bool:
    """Whether the Python running dev.py has pip (Debian's python3 has none without python3-pip)."""
    return importlib.util.find_spec("pip") is not None


def _bootstrap_uv() -> Path | None:
    """uv, installed beside the virtualenv by the pip of the Python that runs dev.py (a few seconds: no pip
    is made inside .venv for it); None where that pip is missing or cannot install it."""
    uv = _installed_uv()
    if uv is None and _runner_has_pip():
        command = [sys.executable, "-m", "pip", "install", "--disable-pip-version-check", "--progress-bar", "off",
                   "--upgrade", "--target", str(UV_HOME), "uv"]
        if _install("installing uv", command, required=False):
            uv = _installed_uv()
    return uv


def ensure_venv() -> None:
    """`.venv` with KGWE installed in it, made or brought up to date with pyproject.toml: a few lines
    saying what happens, the installers' own output in PIP_LOG.

    uv installs (about 10 s; pip took a minute with its cache warm, and making pip inside the virtualenv
    9 CPU-seconds more); pip is the fallback where uv cannot be had or fails (a machine that reaches packages
    only through pip's own configuration, or whose Python has no pip of its own)."""
    if not PY.exists():
        say(f"creating the virtualenv {VENV}")
        try:
            venv.EnvBuilder(with_pip=False).create(VENV)
        except (OSError, subprocess.CalledProcessError) as exc:
            raise SetupError(f"cannot create {VENV}: {exc} (Debian and Ubuntu: apt-get install python3-venv)") from exc
    digest = _requirements_digest()
    if STAMP.exists() and STAMP.read_text() == digest:
        return
    started = time.monotonic()
    PIP_LOG.write_text("", encoding="utf-8")
    say(f"installing KGWE and its dependencies into .venv (the installers' log: {PIP_LOG})")
    kgwe = ["-e", f"{ROOT}[test]"]
    uv = _bootstrap_uv()
    if uv is not None and _install("installing KGWE with its test tools (uv)", _uv(uv, kgwe), required=False):
        reference = _uv(uv, ["--no-deps", "--python-version", "3.14", OPA_REFERENCE])
    else:
        say("uv could not install it (the log says why): installing with pip instead, a minute or more")
        try:
            _install("making pip in .venv", [str(PY), "-m", "ensurepip", "--upgrade"])
        except SetupError as exc:
            raise SetupError(f"{exc}\ndev.py: (Debian and Ubuntu: apt-get install python3-venv)") from exc
        _install("upgrading pip", _pip(["--upgrade", "pip"]))
        _install("installing KGWE with its test tools (pip)", _pip(kgwe))
        reference = _pip(["--no-deps", "--ignore-requires-python", OPA_REFERENCE])
    if not _install("installing OPA's reference engine (optional)", reference, required=False):
        say("opa-golib-python-bindings not installed: Rego reference cases will be skipped")
    STAMP.write_text(digest)
    say(f"installed in {time.monotonic() - started:.0f} s")


# The checks `dev.py test` runs beside pytest, all at once (mypy, the longest, takes about half a minute
# with an empty cache, as in CI; lint-imports most of the rest); any that fails stops the run and fails it,
# so CI (.ci/run) enforces lint, types and the import contracts of pyproject.toml, not only the tests.
CHECKS: tuple[tuple[str, list[str]], ...] = (
    ("ruff", ["ruff", "check", "."]),
    ("mypy", ["mypy", "webhook", "policies", "agent", "certs"]),
    ("lint-imports", ["lint-imports"]),
)


def test_environment() -> dict[str, str]:
    """The environment of the checks and pytest: this one, with Python's bytecode caches allowed.

    With PYTHONDONTWRITEBYTECODE set (some images set it) every pytest worker and every `kgwe` the tests start
    compiles KGWE anew, and pytest rewrites the asserts of every test module again in each worker: about 16
    CPU-seconds of a worker's 29 s of collection. The caches land in __pycache__/, which git ignores."""
    return {name: value for name, value in os.environ.items() if name != "PYTHONDONTWRITEBYTECODE"}


class Checks:
    """CHECKS running at once from the repository root, each with its output kept in a temporary file."""

    def __init__(self, stack: contextlib.ExitStack) -> None:
        print(f"dev.py test: {', '.join(name for name, _ in CHECKS)} (at once, beside the tests)", flush=True)
        self.running: list[tuple[str, subprocess.Popen[bytes], Any]] = []
        for name, command in CHECKS:
            output = stack.enter_context(tempfile.TemporaryFile())  # noqa: SIM115 (the caller's stack closes it)
            process = subprocess.Popen([str(BIN / command[0]), *command[1:]], cwd=ROOT, env=test_environment(),
                                       stdout=output, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
            self.running.append((name, process, output))

    def failed(self) -> bool:
        """Whether a check has finished and failed (without waiting for the others)."""
        return any(process.poll() not in (None, 0) for _, process, _ in self.running)

    def report(self) -> int:
        """Wait for every check; a line each (its last) when it passed, its whole output when it failed, in
        CHECKS' order; the exit status of the first (in that order) that failed, else 0."""
        failed = 0
        for name, process, output in self.running:
            code = process.wait()
            output.seek(0)
            lines = output.read().decode("utf-8", errors="replace").rstrip().splitlines()
            if code == 0:
                print(f"dev.py test: {name}: {lines[-1].strip() if lines else 'passed'}", flush=True)
                continue
            print(f"dev.py test: {name} failed (exit {code}):", *lines, sep="\n", flush=True)
            failed = failed or code
        return failed


def _stop(process: subprocess.Popen[bytes]) -> None:
    """Stop a process started in a session of its own, and everything it started (pytest's workers)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def run_tests(pytest_args: list[str]) -> int:
    """The checks and pytest at once: pytest's workers wait on servers, browsers and deadlines for about a quarter
    of the run, and the checks (mypy's half minute above all) use that time. A failed check stops pytest at once,
    as a failed test stops the run (-x); the checks' lines follow pytest's output. In a fresh clone the tests are
    collected once first, beside the checks: the workers start on warm caches."""
    with contextlib.ExitStack() as stack:
        checks = Checks(stack)
        for warming in warm_caches():
            warming.wait()  # its failures, if any, are pytest's to report next
        tests: subprocess.Popen[bytes] | None = None
        if not checks.failed():
            workers = test_workers()
            print(f"dev.py test: pytest ({workers} workers)", flush=True)
            # -x: the first failure stops the run (every worker), so a broken change is reported in seconds.
            # loadfile: a file's tests share one worker, so a module's server or browser starts once, not per worker.
            tests = subprocess.Popen([str(PY), "-m", "pytest", "-q", "-x", "-n", str(workers), "--dist", "loadfile",
                                      *pytest_args], env=test_environment(), start_new_session=True)
        try:
            while tests is not None and tests.poll() is None:
                if checks.failed():
                    _stop(tests)
                    print("dev.py test: a check failed, so the tests were stopped", flush=True)
                    break
                time.sleep(0.2)
        except KeyboardInterrupt:
            if tests is not None:
                _stop(tests)
            raise
        failed = checks.report()
        if failed:
            print("dev.py test: fix the failed checks", flush=True)
            return failed
        assert tests is not None
        return tests.wait()


def _caches_cold() -> bool:
    """Whether pytest has not yet written its bytecode of the test modules here (a fresh clone, as in CI)."""
    return not any((ROOT / "tests" / "__pycache__").glob("conftest.*-pytest-*.pyc"))


def warm_caches() -> list[subprocess.Popen[bytes]]:
    """In a fresh clone, collect the tests once (`pytest --collect-only`, output dropped): it writes the bytecode
    of KGWE, of the packages the tests import (uv installs them uncompiled) and pytest's of the test modules,
    which every pytest worker would otherwise compile at once, each for itself (a cold collection took 27 CPU-s,
    a warm one 9). One collection, not one per CPU: the checks keep the other CPUs busy meanwhile (mypy alone
    about 30 CPU-s), and two collections of half the folders each compiled the packages both import, 37 CPU-s
    in all. None where the caches are already there."""
    if not _caches_cold():
        return []
    return [subprocess.Popen([str(PY), "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider"], cwd=ROOT,
                             env=test_environment(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             stdin=subprocess.DEVNULL)]


# Test processes: two per CPU, at most this many. Much of the suite's time is spent waiting (servers starting,
# deadlines passing, browsers loading pages), the more so as its CPU shrinks: on CI's two CPUs, a quiet machine,
# the same tree, warm caches, pytest took 240 s on three workers (139 % of the CPUs busy), 206 s on four (159 %)
# and 211 s on five, which spent 11 % more CPU. Earlier, with 40 % more CPU in the suite, one worker per CPU
# made 148 % and a third worker 173 %. More workers than this wait on each other more than they gain.
MAX_TEST_WORKERS = 4


def test_workers() -> int:
    """pytest-xdist workers for this machine: two per CPU (those this process may use), capped."""
    return max(1, min(2 * _cpus(), MAX_TEST_WORKERS))


def _cpus() -> int:
    """The CPUs this process may use."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def start_system_packages() -> None:
    """On a machine without the Debian packages the tests run for real (Chromium, Prometheus), as in CI, their
    install starts now, in the background: it overlaps the virtualenv's install and the checks instead of holding
    up the pytest worker that first needs one (bench/system_packages.py; the tests wait for it to end)."""
    spec = importlib.util.spec_from_file_location("kgwe_system_packages", ROOT / "bench" / "system_packages.py")
    if spec is None or spec.loader is None:
        return
    packages = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(packages)
    started = packages.start_background_install()
    if started:
        say(f"installing {', '.join(started)} with apt-get in the background, for the browser and Prometheus tests")


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in {"serve", "test"}:
        print(__doc__)
        return 2
    if argv[0] == "test":
        start_system_packages()
    try:
        ensure_venv()
    except SetupError as exc:
        say(str(exc))
        return 1
    command, rest = argv[0], argv[1:]
    if command == "serve":
        # A development server listens on loopback unless told otherwise (`--host 0.0.0.0`).
        host = [] if any(a == "--host" or a.startswith("--host=") for a in rest) else ["--host", "127.0.0.1"]
        args = [str(BIN / "kgwe"), "serve", "--cluster", str(ROOT / "examples" / "cluster"),
                "--config", str(ROOT / "examples" / "config.yaml"), *host, *rest]
    else:
        os.chdir(ROOT)
        return run_tests(rest)
    os.chdir(ROOT)
    return subprocess.call(args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
