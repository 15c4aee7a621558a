#!/usr/bin/env python3
"""Set-up entry points for a fresh machine that has only Python.

    python3 dev.py serve   # webhook on https://127.0.0.1:8443 against examples/cluster (--host 0.0.0.0 to share)
    python3 dev.py test    # ruff, mypy, lint-imports, then the whole test suite (stops at the first failure)

Each creates `.venv` (if missing), installs KGWE and what it needs into it, then runs.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
BIN = VENV / ("Scripts" if os.name == "nt" else "bin")
PY = BIN / "python"
STAMP = VENV / ".kgwe-installed"


def _requirements_digest() -> str:
    return hashlib.sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest()


def ensure_venv() -> None:
    if not PY.exists():
        print(f"creating virtualenv in {VENV}", flush=True)
        venv.EnvBuilder(with_pip=True).create(VENV)
    digest = _requirements_digest()
    if STAMP.exists() and STAMP.read_text() == digest:
        return
    print("installing KGWE and its dependencies into .venv", flush=True)
    pip = [str(PY), "-m", "pip", "install", "--disable-pip-version-check", "-q"]
    subprocess.run([*pip, "--upgrade", "pip"], check=True)
    subprocess.run([*pip, "-e", f"{ROOT}[test]"], check=True)
    # OPA's own engine, the reference of the Rego conformance suite. Every release declares
    # Python >= 3.14 but works on 3.11; the tests skip the reference cases when it is missing.
    reference = [*pip, "--no-deps", "--ignore-requires-python", "opa-golib-python-bindings==0.4.4"]
    if subprocess.run(reference).returncode != 0:
        print("opa-golib-python-bindings not installed: Rego reference cases will be skipped", flush=True)
    STAMP.write_text(digest)


# The checks `dev.py test` runs before pytest, in order; the first that fails stops the run, so CI
# (.ci/run) enforces lint, types and the import contracts of pyproject.toml, not only the tests.
CHECKS: tuple[tuple[str, list[str]], ...] = (
    ("ruff", ["ruff", "check", "."]),
    ("mypy", ["mypy", "webhook", "policies", "agent", "certs"]),
    ("lint-imports", ["lint-imports"]),
)


def run_checks() -> int:
    """Run CHECKS from the repository root; the exit status of the first that fails, else 0."""
    for name, command in CHECKS:
        print(f"dev.py test: {name}", flush=True)
        code = subprocess.call([str(BIN / command[0]), *command[1:]], cwd=ROOT)
        if code != 0:
            print(f"dev.py test: {name} failed (exit {code}); fix it before the tests run", flush=True)
            return code
    return 0


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in {"serve", "test"}:
        print(__doc__)
        return 2
    ensure_venv()
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
        print("dev.py test: pytest", flush=True)
        args = [str(PY), "-m", "pytest", "-q", *rest]
    os.chdir(ROOT)
    return subprocess.call(args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
