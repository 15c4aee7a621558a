#!/usr/bin/env python3
"""Set-up entry points for a fresh machine that has only Python.

    python3 dev.py serve   # webhook on https://127.0.0.1:8443 against examples/cluster (--host 0.0.0.0 to share)
    python3 dev.py test    # ruff, mypy, lint-imports, then the test suite on every CPU (stops at the first failure)
    python3 dev.py test --long   # the same, with the long fuzz hunts and soaks (tests marked slow)

Arguments after `test` go to pytest: `python3 dev.py test tests/quotas -n 0` runs one folder in one process.

Each creates `.venv` (if missing), installs KGWE and what it needs into it, then runs.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import time
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
BIN = VENV / ("Scripts" if os.name == "nt" else "bin")
PY = BIN / "python"
STAMP = VENV / ".kgwe-installed"
# pip's whole output: a hundred lines of warnings on some machines, none of which a first run needs to read.
PIP_LOG = VENV / "pip.log"
# Lines of that log shown when pip fails: its error is at the end.
FAILURE_TAIL = 25


class SetupError(Exception):
    """The set-up failed; the message says what and where the log is."""


def say(message: str) -> None:
    print(f"dev.py: {message}", flush=True)


def _requirements_digest() -> str:
    return hashlib.sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest()


def _pip(step: str, args: list[str], *, required: bool = True) -> bool:
    """Run `pip install ARGS` with its output appended to PIP_LOG; say the step in one line. A required step
    that fails raises SetupError with the log's last lines; an optional one returns False."""
    say(step)
    with PIP_LOG.open("a", encoding="utf-8") as log:
        log.write(f"\n=== {step}: pip install {' '.join(args)}\n")
        log.flush()
        command = [str(PY), "-m", "pip", "install", "--disable-pip-version-check", "--progress-bar", "off", *args]
        code = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL).returncode
    if code == 0:
        return True
    if not required:
        return False
    tail = PIP_LOG.read_text(encoding="utf-8", errors="replace").splitlines()[-FAILURE_TAIL:]
    raise SetupError("\n".join([f"{step} failed (pip exit {code}); the end of its log:", *tail,
                                f"dev.py: the whole log: {PIP_LOG}"]))


def ensure_venv() -> None:
    """`.venv` with KGWE installed in it, made or brought up to date with pyproject.toml: a few lines
    saying what happens, pip's own output in PIP_LOG."""
    if not PY.exists():
        say(f"creating the virtualenv {VENV}")
        try:
            venv.EnvBuilder(with_pip=True).create(VENV)
        except (OSError, subprocess.CalledProcessError) as exc:
            raise SetupError(f"cannot create {VENV}: {exc} (Debian and Ubuntu: apt-get install python3-venv)") from exc
    digest = _requirements_digest()
    if STAMP.exists() and STAMP.read_text() == digest:
        return
    started = time.monotonic()
    PIP_LOG.write_text("", encoding="utf-8")
    say(f"installing KGWE and its dependencies into .venv (minutes the first time; pip's log: {PIP_LOG})")
    _pip("upgrading pip", ["--upgrade", "pip"])
    _pip("installing KGWE with its test tools", ["-e", f"{ROOT}[test]"])
    # OPA's own engine, the reference of the Rego conformance suite. Every release declares
    # Python >= 3.14 but works on 3.11; the tests skip the reference cases when it is missing.
    reference = ["--no-deps", "--ignore-requires-python", "opa-golib-python-bindings==0.4.4"]
    if not _pip("installing OPA's reference engine (optional)", reference, required=False):
        say("opa-golib-python-bindings not installed: Rego reference cases will be skipped")
    STAMP.write_text(digest)
    say(f"installed in {time.monotonic() - started:.0f} s")


# The checks `dev.py test` runs before pytest, in order; the first that fails stops the run, so CI
# (.ci/run) enforces lint, types and the import contracts of pyproject.toml, not only the tests.
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


def run_checks() -> int:
    """Run CHECKS from the repository root; the exit status of the first that fails, else 0."""
    for name, command in CHECKS:
        print(f"dev.py test: {name}", flush=True)
        code = subprocess.call([str(BIN / command[0]), *command[1:]], cwd=ROOT, env=test_environment())
        if code != 0:
            print(f"dev.py test: {name} failed (exit {code}); fix it before the tests run", flush=True)
            return code
    return 0


# Test processes: one per CPU, at most this many (the suite starts servers and browsers; more workers than
# this wait on each other more than they gain).
MAX_TEST_WORKERS = 4


def test_workers() -> int:
    """pytest-xdist workers for this machine: its CPUs (those this process may use), capped."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cpus = os.cpu_count() or 1
    return max(1, min(cpus, MAX_TEST_WORKERS))


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in {"serve", "test"}:
        print(__doc__)
        return 2
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
        code = run_checks()
        if code != 0:
            return code
        workers = test_workers()
        print(f"dev.py test: pytest ({workers} workers)", flush=True)
        # -x: the first failure stops the run (every worker), so a broken change is reported in seconds.
        # loadfile: a file's tests share one worker, so a module's server or browser starts once, not per worker.
        args = [str(PY), "-m", "pytest", "-q", "-x", "-n", str(workers), "--dist", "loadfile", *rest]
        return subprocess.call(args, env=test_environment())
    os.chdir(ROOT)
    return subprocess.call(args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
