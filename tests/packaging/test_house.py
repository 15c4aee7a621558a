"""The house rules of issue 34 (docs/architecture.md), held by a test rather than by memory: small modules,
a small runtime bundle, and no import cycle between the product's files or folders. The layers and the wings'
independence are import-linter's contracts (pyproject.toml), which `dev.py test` runs beside the tests."""

from __future__ import annotations

import ast
from pathlib import Path

import grimp

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


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(edges):
        if start in index:
            continue
        work = [(start, iter(sorted(edges.get(start, ()))))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, successors = work[-1]
            step = next(successors, None)
            if step is not None:
                if step not in index:
                    index[step] = low[step] = len(index)
                    stack.append(step)
                    on_stack.add(step)
                    work.append((step, iter(sorted(edges.get(step, ())))))
                elif step in on_stack:
                    low[node] = min(low[node], index[step])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_no_import_cycle_between_files_or_folders() -> None:
    graph = grimp.build_graph(*PACKAGES)
    files = {m: set(graph.find_modules_directly_imported_by(m)) for m in graph.modules}
    assert _cycles(files) == []

    def folder(module: str) -> str:
        return module if graph.find_children(module) else module.rsplit(".", 1)[0]

    folders: dict[str, set[str]] = {}
    for importer, imported in ((a, b) for a, targets in files.items() for b in targets):
        source, target = folder(importer), folder(imported)
        # A folder and the folders inside it are one house: a package's __init__ may name its children.
        if source != target and not target.startswith(source + ".") and not source.startswith(target + "."):
            folders.setdefault(source, set()).add(target)
    assert _cycles(folders) == []


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []
