"""Which parts of the admission input a Rego policy set can read, found in its syntax tree.

The engine is handed only those parts (`Projection.apply`): parsing the input is a large share of a
Rego query's cost, and a pod as `/validate` sees it (affinity, annotations, env, volumes) is mostly
what no policy reads. The same projection keys the answer memo (policies/answer_memo.py): replicas
that agree on everything the policies read share one answer.

Sound by construction, not by guessing: every reference whose root is `input` (rule bodies, heads,
imports, function arguments, `with` targets, comprehension bodies) contributes the path of its leading
constant keys (`input.request.object.spec.containers[_].image` reads `request.object.spec.containers`
whole). A bare `input` (`json.marshal(input)`, `object.get(input, ...)`, `import input`) reads all of it,
and so does any module the regorus parser cannot read on its own. A path keeps the whole subtree below
it, so whatever the policy does with what it reached (iterate keys, compare whole objects) sees what
the full input holds there. A projection only removes keys, never changes a value: what a removed key
could change is the answer of a policy that reads it, and no policy run for the request does.

Which modules count: those of every policy the engine runs for the request (everything but the
built-ins answered natively, `input.kgwe.native`) and every module whose package is in, above or below
the aggregate's (`kgwe.aggregate`: such a module adds to the very documents KGWE queries), closed over
the `data` references they make (a library package they import or call, a package of theirs split
across files). A `data` reference with a computed root reads every module. A `with` modifier anywhere
among them turns the projection off: it changes what other rules see.

Remembering answers also needs the answer to be a function of the input: a set whose running modules
call a built-in that reads the clock, randomness or the network (`IMPURE_BUILTINS`) is projected but
never remembered.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from policies.engines.rego_rvm import RVM_PACKAGE
from policies.loading.aggregate import AGGREGATE_PACKAGE

log = logging.getLogger("kgwe.policies")

Path = tuple[str, ...]
WHOLE: Path = ()  # the path of a read of the whole document

# Built-ins whose answer is not a function of their arguments (clock, randomness, network, runtime).
IMPURE_BUILTINS = frozenset({
    "time.now_ns", "rand.intn", "uuid.rfc4122", "http.send", "net.lookup_ip_addr", "opa.runtime",
    "io.jwt.decode_verify", "crypto.x509.parse_and_verify_certificates",
    "crypto.x509.parse_and_verify_certificates_with_options",
})
# What KGWE's aggregate reads of the input (policies/loading/aggregate.py and the RVM's helpers): which
# policies are active and which the built-ins answered.
AGGREGATE_READS: frozenset[Path] = frozenset({("kgwe",)})
_REFS = ("RefDot", "RefBrack")
_PROJECTIONS_PER_SET = 16


@dataclass(frozen=True)
class ModuleReads:
    """What one module reads: input paths, `data` paths, and whether it rewrites documents or calls an
    impure built-in."""

    package: Path
    inputs: frozenset[Path]
    data: frozenset[Path]
    rewrites: bool
    impure: frozenset[str]


# The aggregates themselves, as modules a policy could reference: they reach every policy.
_AGGREGATES = tuple(
    ModuleReads(tuple(package.split(".")), AGGREGATE_READS, frozenset({WHOLE}), rewrites=False, impure=frozenset())
    for package in (AGGREGATE_PACKAGE, RVM_PACKAGE)
)


class _Found:
    def __init__(self) -> None:
        self.inputs: set[Path] = set()
        self.data: set[Path] = set()
        self.rewrites = False
        self.impure: set[str] = set()


def _static_key(index: Any) -> str | None:
    """The key a bracket index names when it is a string literal, else None."""
    if isinstance(index, dict) and len(index) == 1:
        kind, body = next(iter(index.items()))
        if kind in ("String", "RawString") and isinstance(body, dict) and isinstance(body.get("value"), str):
            return str(body["value"])
    return None


def _field(step: Mapping[str, Any]) -> str | None:
    field = step.get("field")
    # The parser writes a field as [span, name].
    if isinstance(field, list) and field and isinstance(field[-1], str):
        return field[-1]
    return None


def _unchain(node: Mapping[str, Any]) -> tuple[Any, list[str | None], list[Any]]:
    """A reference chain as (root expression, keys from the root outward, computed indexes); a key is None
    where the step is computed (or not a string literal)."""
    keys: list[str | None] = []
    indexes: list[Any] = []
    current: Any = node
    while isinstance(current, dict) and len(current) == 1 and next(iter(current)) in _REFS:
        kind, step = next(iter(current.items()))
        if kind == "RefDot":
            keys.append(_field(step))
        else:
            key = _static_key(step.get("index"))
            keys.append(key)
            if key is None:
                indexes.append(step.get("index"))
        current = step.get("refr")
    keys.reverse()
    return current, keys, indexes


def _var(node: Any) -> str | None:
    if isinstance(node, dict) and len(node) == 1 and isinstance(node.get("Var"), dict):
        value = node["Var"].get("value")
        return value if isinstance(value, str) else None
    return None


def _leading(keys: list[str | None]) -> Path:
    path: list[str] = []
    for key in keys:
        if key is None:
            break
        path.append(key)
    return tuple(path)


def _dotted(node: Any) -> str | None:
    """`time.now_ns` for the function expression of a call, when it is a plain dotted name."""
    root, keys, _ = _unchain(node) if isinstance(node, dict) else (None, [], [])
    name = _var(root)
    if name is None or any(k is None for k in keys):
        return None
    return ".".join([name, *(k for k in keys if k is not None)])


def _walk(node: Any, found: _Found) -> None:
    if isinstance(node, list):
        for item in node:
            _walk(item, found)
        return
    if not isinstance(node, dict):
        return
    if node.get("with_mods"):
        found.rewrites = True
    if len(node) == 1:
        kind = next(iter(node))
        if kind in _REFS:
            root, keys, indexes = _unchain(node)
            name = _var(root)
            if name == "input":
                found.inputs.add(_leading(keys))
            elif name == "data":
                found.data.add(_leading(keys))
            else:
                _walk(root, found)
            _walk(indexes, found)
            return
        name = _var(node)
        if name == "input":
            found.inputs.add(WHOLE)
        elif name == "data":
            found.data.add(WHOLE)
        if name is not None:
            return
        if kind == "Call" and isinstance(node["Call"], dict):
            called = _dotted(node["Call"].get("fcn"))
            if called in IMPURE_BUILTINS:
                found.impure.add(called)
    for value in node.values():
        _walk(value, found)


def reads_of_ast(ast: Mapping[str, Any]) -> ModuleReads:
    """The reads of one module from regorus' syntax tree (`Engine.get_ast_as_json`, one module's `ast`)."""
    package = ast.get("package") or {}
    root, keys, _ = _unchain(package.get("refr") or {})
    name = _var(root)
    found = _Found()
    _walk(ast.get("imports"), found)
    _walk(ast.get("rules"), found)
    return ModuleReads(
        package=tuple(k for k in [name, *keys] if k is not None) if name else WHOLE,
        inputs=frozenset(found.inputs), data=frozenset(found.data), rewrites=found.rewrites,
        impure=frozenset(found.impure),
    )


def module_reads(name: str, source: str) -> ModuleReads | None:
    """The reads of one module, or None when regorus cannot parse it on its own (then: it reads all)."""
    try:
        import regorus

        engine = regorus.Engine()
        engine.add_policy(name, source)
        parsed = orjson.loads(engine.get_ast_as_json())
        return reads_of_ast(parsed[0]["ast"])
    except Exception as exc:  # any failure means: not known, so everything is read
        log.info("Rego module %s: its input reads are not known (%s); it is handed the whole input", name, exc)
        return None


# -- the projection -------------------------------------------------------------------------------

Tree = dict[str, "Tree | None"]  # None below a key: the whole subtree


def _tree(paths: Iterable[Path]) -> Tree | None:
    """The paths as a key tree, or None when one of them is the whole document."""
    tree: Tree = {}
    for path in sorted(set(paths), key=len):
        if path == WHOLE:
            return None
        node: Tree | None = tree
        for key in path[:-1]:
            if node is None:
                break
            child = node.setdefault(key, {})
            node = child
        if node is not None:
            node[path[-1]] = None
    return tree


def _apply(document: Mapping[str, Any], tree: Tree) -> dict[str, Any]:
    kept: dict[str, Any] = {}
    for key, below in tree.items():
        if key not in document:
            continue
        value = document[key]
        kept[key] = _apply(value, below) if below is not None and isinstance(value, dict) else value
    return kept


@dataclass(frozen=True)
class Projection:
    """The part of the input a request's running modules can read."""

    tree: Tree
    deterministic: bool  # no impure built-in among the running modules: the answer may be remembered

    def apply(self, document: Mapping[str, Any]) -> dict[str, Any]:
        return _apply(document, self.tree)


def _overlaps(left: Path, right: Path) -> bool:
    shorter = min(len(left), len(right))
    return left[:shorter] == right[:shorter]


class InputReads:
    """The reads of one policy set, by unit (name -> its modules' reads; None for a module whose reads are
    not known). `libraries`: the units with no rules of their own (rego/lib), which run only where a
    running module references them."""

    def __init__(self, units: Mapping[str, Iterable[ModuleReads | None]], libraries: Iterable[str] = ()) -> None:
        self._units = {name: list(modules) for name, modules in units.items()}
        self._libraries = frozenset(libraries)
        self._projections: dict[frozenset[str], Projection | None] = {}
        self._lock = threading.Lock()

    @classmethod
    def of_sources(cls, units: Mapping[str, Mapping[str, str]], libraries: Iterable[str] = ()) -> InputReads:
        """From each unit's modules (file name -> source)."""
        return cls({unit: [module_reads(name, source) for name, source in modules.items()]
                    for unit, modules in units.items()}, libraries)

    def projection(self, skipped: Iterable[str] = ()) -> Projection | None:
        """The projection for a request where the engine skips the policies `skipped` (answered natively),
        or None when the whole input must be handed over."""
        key = frozenset(skipped)
        if key in self._projections:
            return self._projections[key]
        projection = self._compute(key)
        with self._lock:
            if len(self._projections) >= _PROJECTIONS_PER_SET:
                self._projections.clear()
            self._projections[key] = projection
        return projection

    def _compute(self, skipped: frozenset[str]) -> Projection | None:
        modules = [m for unit, reads in self._units.items() for m in reads]
        if any(m is None for m in modules):
            return None
        known = [*(m for m in modules if m is not None), *_AGGREGATES]
        running = {id(m): m for unit, reads in self._units.items()
                   if unit not in skipped and unit not in self._libraries for m in reads if m is not None}
        # The aggregate queries read every module in, above or below their packages, whichever unit holds
        # it and whether or not a policy references it: `package kgwe.aggregate` with `deny.x := ...`
        # adds a deny, `package kgwe.aggregate.x` (or `kgwe` with `aggregate.x := ...`) a document whose
        # failure fails the query.
        running.update({id(m): m for m in modules
                        if m is not None and any(_overlaps(m.package, a.package) for a in _AGGREGATES)})
        # Close over `data` references: a running module may reach any module whose package its
        # reference overlaps (imports, calls, rules of its own package in another file).
        pending = list(running.values())
        while pending:
            module = pending.pop()
            targets = [*module.data, module.package]
            for other in known:
                if id(other) not in running and any(_overlaps(t, other.package) for t in targets):
                    running[id(other)] = other
                    pending.append(other)
        chosen = list(running.values())
        if any(m.rewrites for m in chosen):
            return None
        tree = _tree([*AGGREGATE_READS, *(path for m in chosen for path in m.inputs)])
        if tree is None:
            return None
        return Projection(tree, deterministic=not any(m.impure for m in chosen))


__all__ = [
    "AGGREGATE_READS", "IMPURE_BUILTINS", "WHOLE", "InputReads", "ModuleReads", "Projection", "module_reads",
    "reads_of_ast",
]
