"""The house rules of issue 34 (docs/architecture.md) that import-linter cannot hold, held by a test rather than
by memory: small modules and a small runtime bundle. The layers, the wings' independence and no import cycle
between files or folders are import-linter's contracts (pyproject.toml), which `dev.py test` runs beside the
tests."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("webhook", "policies", "agent", "certs", "rego")
MAX_MODULE_LINES = 400
MAX_RUNTIME_LINES = 150


def _modules() -> list[Path]:
    return sorted(path for package in PACKAGES for path in (ROOT / package).rglob("*.py"))


def test_no_module_is_over_400_lines() -> None:
    long = {str(p.relative_to(ROOT)): n for p in _modules()
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES}
    assert not long, f"split these by the ideas they hold (at most {MAX_MODULE_LINES} lines): {long}"


def test_the_runtime_is_a_bundle_of_ports() -> None:
    tree = ast.parse((ROOT / "webhook" / "runtime.py").read_text(encoding="utf-8"))
    runtime = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Runtime")
    assert runtime.end_lineno is not None
    assert runtime.end_lineno - runtime.lineno + 1 <= MAX_RUNTIME_LINES
