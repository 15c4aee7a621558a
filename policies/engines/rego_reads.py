"""Which parts of the admission input a Rego policy set can read, found in its syntax tree.

The engine is handed only those parts (`Projection.apply`): parsing the input is a large share of a
Rego query's cost, and a pod as `/validate` sees it (affinity, annotations, env, volumes) is mostly
what no policy reads. The same projection keys the answer memo (policies/runtime/answer_memo.py): replicas
that agree on everything the policies read share one answer.

Sound by construction, not by guessing: every reference whose root stands for the input (rule bodies,
heads, function arguments, `with` targets, comprehension bodies) contributes the path of its leading
constant keys (`input.request.object.spec.containers[_].image` reads `request.object.spec.containers`
whole). A bare `input` (`json.marshal(input)`, `x := input`) reads all of it, and so does any module the
regorus parser cannot read on its own. `object.get(<path>, "key", default)` with literal keys reads below
them. A path keeps the whole subtree below it, so whatever the policy does with what it reached (iterate
keys, compare whole objects) sees what the full input holds there. A projection only removes keys, never
changes a value: what a removed key could change is the answer of a policy that reads it, and no policy
run for the request does.

Names that stand for the input: `input`; an import of it (`import input.request.object as pod`); and an
alias, a rule of the package defined once, without a body, as a constant part of the input (`pod :=
input.request.object`, or of another alias). An alias is read where it is used, as far as the use
reaches: `pod.metadata.labels` in its package, `data.kgwe.lib.pod.pod.spec` or an imported `pod.pod.spec`
elsewhere; a reference to its package as a whole (`data.kgwe.lib.pod`, or a computed step into it)
reads every alias the package holds, whole. A local variable that shadows such a name only adds reads.
Rules the aggregate queries (`deny`, `warn`, `decision`) are never aliases.

Which modules count: those of every policy the engine runs for the request (everything but the
built-ins answered natively, `input.kgwe.native`) and every module whose package is in, above or below
the aggregate's (`kgwe.aggregate`: such a module adds to the very documents KGWE queries), closed over
the `data` references they make (a library package they import or call, a package of theirs split
across files). A `data` reference with a computed root reads every module. A `with` modifier anywhere
among them turns the projection off: it changes what other rules see.

Remembering answers also needs the answer to be a function of the input: a set whose running modules
call a built-in that reads the clock, randomness or the network (`IMPURE_BUILTINS`, rego_read_walk.py) is projected but
never remembered.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from policies.engines.aggregate import AGGREGATE_PACKAGE, RVM_PACKAGE
from policies.engines.projection import WHOLE, Path, Projection, overlaps, projection_of
from policies.engines.rego_ast import document_imports, head_name, package_path, parse_module, var
from policies.engines.rego_read_scope import Found, Root, Scope, constant_path
from policies.engines.rego_read_walk import Functions, input_sources, walk_collection, walk_rule

log = logging.getLogger("kgwe.policies")

# What KGWE's aggregate reads of the input (policies/engines/aggregate.py and the RVM's helpers): which
# policies are active and which the built-ins answered.
AGGREGATE_READS: frozenset[Path] = frozenset({("kgwe",)})
_PROJECTIONS_PER_SET = 16


@dataclass(frozen=True)
class ModuleReads:
    """What one module reads: input paths, `data` paths, and whether it rewrites documents or calls an
    impure built-in. `aliases`: its rules that only name a part of the input (`pod :=
    input.request.object`), read where they are referenced rather than where they are defined."""

    package: Path
    inputs: frozenset[Path]
    data: frozenset[Path]
    rewrites: bool
    impure: frozenset[str]
    aliases: tuple[tuple[str, Path], ...] = ()


# The aggregates themselves, as modules a policy could reference: they reach every policy.
_AGGREGATES = tuple(
    ModuleReads(tuple(package.split(".")), AGGREGATE_READS, frozenset({WHOLE}), rewrites=False, impure=frozenset())
    for package in (AGGREGATE_PACKAGE, RVM_PACKAGE)
)
# Rules the aggregate queries in every policy's package: never aliases (the aggregate reads them whole).
_QUERIED_RULES = frozenset({"deny", "warn", "decision"})
# -- collections and their members --------------------------------------------------------------------
#
# `some c in <collection>` binds `c` to a member; where the collection's members are members of input
# collections, `c.image` reads `<collection>[*].image` (EACH) rather than the whole collection. A
# collection is an input path, a member's path, `object.get` of one with a constant default, an
# `array.concat` of collections, an array comprehension whose term is its own member variable, or a
# collection rule (below). Anything else is no collection: walked as before, it reads whole.
# Not a set comprehension: a set of members is deduplicated by their whole values.


def _alias_value(rule: Any) -> Any:
    """The value expression of `name := <expression>` with no body, else None."""
    spec = rule.get("Spec") if isinstance(rule, dict) and len(rule) == 1 else None
    if not isinstance(spec, dict) or spec.get("bodies"):
        return None
    head = spec.get("head")
    compr = head.get("Compr") if isinstance(head, dict) and len(head) == 1 else None
    if not isinstance(compr, dict) or var(compr.get("refr")) is None:
        return None
    assign = compr.get("assign")
    if not isinstance(assign, dict) or assign.get("op") not in ("ColEq", "Eq"):
        return None
    return assign.get("value")


@dataclass
class _Parsed:
    """One module as parsed, before its package's aliases are known."""

    package: Path
    ast: Mapping[str, Any]
    imports: dict[str, Root]
    heads: list[str]
    alias_values: dict[str, Any]  # rule name -> value, for every bodiless `name := ...` rule


def _parse(name: str, source: str) -> _Parsed:
    ast = parse_module(name, source)
    imports: dict[str, Root] = {i.name: (i.root, i.path) for i in document_imports(ast, source)}
    rules = ast.get("rules") or []
    heads = [head for head in (head_name(rule) for rule in rules) if head is not None]
    values = {}
    for rule in rules:
        value = _alias_value(rule)
        head = head_name(rule)
        if value is not None and head is not None and head not in _QUERIED_RULES:
            values[head] = value
    return _Parsed(package_path(ast), ast, imports, heads, values)


def _once(modules: list[_Parsed]) -> dict[str, tuple[Any, _Parsed]]:
    """The bodiless rules defined once in one package: name -> (value, module)."""
    counts: dict[str, int] = {}
    for module in modules:
        for head in module.heads:
            counts[head] = counts.get(head, 0) + 1
    return {name: (value, module) for module in modules for name, value in module.alias_values.items()
            if counts.get(name) == 1}


def _aliases(modules: list[_Parsed]) -> dict[str, Path]:
    """The aliases of one package: bodiless rules defined once in it whose value names a constant part of
    the input, directly or through another alias."""
    candidates = _once(modules)
    resolved: dict[str, Path] = {}
    for _ in range(len(candidates) + 1):  # an alias of an alias resolves one round later
        progress = False
        for name, (value, module) in candidates.items():
            if name in resolved:
                continue
            # Only names already known to be aliases: a chain through anything else is not one.
            path = constant_path(value, Scope(module.imports, {k: v for k, v in resolved.items() if k != name}))
            if path is not None:
                resolved[name] = path
                progress = True
        if not progress:
            break
    return resolved


def _collections(packages: Mapping[Path, list[_Parsed]], aliases: Mapping[Path, dict[str, Path]]
                 ) -> dict[Path, frozenset[Path]]:
    """Every package's collection rules: bodiless rules defined once, not aliases, whose value is a
    collection of members of input collections (`containers := array.concat(object.get(pod.spec,
    "containers", []), ...)`, `gpu_containers := [c | some c in containers; is_gpu_container(c)]`), by
    their path below `data`, with those input collections; to a fixpoint across packages."""
    candidates = [((*package, name), value, module, aliases[package])
                  for package, members in packages.items()
                  for name, (value, module) in _once(members).items() if name not in aliases[package]]
    resolved: dict[Path, frozenset[Path]] = {}
    for _ in range(len(candidates) + 1):
        progress = False
        for path, value, module, package_aliases in candidates:
            if path in resolved:
                continue
            scope = Scope(module.imports, package_aliases, module.package,
                           collections={k: v for k, v in resolved.items() if k != path})
            sources = input_sources(value, scope)
            if sources is not None:
                resolved[path] = sources
                progress = True
        if not progress:
            break
    return resolved


def _reads(module: _Parsed, scope: Scope) -> ModuleReads:
    found = Found()
    own: list[tuple[str, Path]] = []
    for rule in module.ast.get("rules") or []:
        head = head_name(rule)
        if head is not None and head in scope.aliases and _alias_value(rule) is not None:
            own.append((head, scope.aliases[head]))
            continue  # read where it is referenced
        # A collection rule: its members are read where it is iterated; here, what choosing them reads and
        # the collections themselves (regorus evaluates every rule of a package it is asked about, and
        # `object.get` or `array.concat` fails on a collection of the wrong type).
        if head is not None and (*module.package, head) in scope.collections \
                and walk_collection(_alias_value(rule), scope, found):
            continue
        walk_rule(rule, scope, found)
    return ModuleReads(module.package, frozenset(found.inputs), frozenset(found.data), found.rewrites,
                       frozenset(found.impure), tuple(own))


def _parse_or_none(name: str, source: str) -> _Parsed | None:
    try:
        return _parse(name, source)
    except Exception as exc:  # any failure means: not known, so everything is read
        log.info("Rego module %s: its input reads are not known (%s); it is handed the whole input", name, exc)
        return None


def reads_of_modules(modules: Mapping[str, str]) -> dict[str, ModuleReads | None]:
    """The reads of each module (file name -> source), with the aliases, collection rules and functions
    of their packages resolved across them; None for a module the parser cannot read on its own (then:
    it reads everything)."""
    return dict(_reads_of_modules(tuple(modules.items())))


# A reload after a GPUPolicy or configuration change reads the unchanged Rego set again: the walk of its
# rules is a fifth of a reload's time, and its result (frozen ModuleReads) is the same each time.
@functools.lru_cache(maxsize=16)
def _reads_of_modules(items: tuple[tuple[str, str], ...]) -> tuple[tuple[str, ModuleReads | None], ...]:
    modules = dict(items)
    parsed = {name: _parse_or_none(name, source) for name, source in modules.items()}
    packages: dict[Path, list[_Parsed]] = {}
    for module in parsed.values():
        if module is not None:
            packages.setdefault(module.package, []).append(module)
    aliases = {package: _aliases(members) for package, members in packages.items()}
    collections = _collections(packages, aliases)
    definitions: dict[Path, list[tuple[Any, Scope]]] = {}
    functions = Functions(definitions)
    scopes: dict[int, Scope] = {}
    for module in (m for m in parsed.values() if m is not None):
        scope = scopes[id(module)] = Scope(module.imports, aliases[module.package], module.package,
                                            collections=collections, functions=functions)
        for rule in module.ast.get("rules") or []:
            head = (rule.get("Spec") or {}).get("head") if isinstance(rule, dict) else None
            name = head_name(rule)
            if isinstance(head, dict) and "Func" in head and name is not None:
                definitions.setdefault((*module.package, name), []).append((rule, scope))
    return tuple((name, None if module is None else _reads(module, scopes[id(module)]))
                 for name, module in parsed.items())


def module_reads(name: str, source: str) -> ModuleReads | None:
    """The reads of one module on its own, or None when regorus cannot parse it (then: it reads all)."""
    return reads_of_modules({name: source})[name]


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
        """From each unit's modules (file name -> source); a package's aliases resolve across units."""
        named = {(unit, name): source for unit, modules in units.items() for name, source in modules.items()}
        reads = reads_of_modules({f"{unit}/{name}": source for (unit, name), source in named.items()})
        return cls({unit: [reads[f"{unit}/{name}"] for name in modules] for unit, modules in units.items()},
                   libraries)

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
                        if m is not None and any(overlaps(m.package, a.package) for a in _AGGREGATES)})
        # Close over `data` references: a running module may reach any module whose package its
        # reference overlaps (imports, calls, rules of its own package in another file).
        pending = list(running.values())
        while pending:
            module = pending.pop()
            targets = [*module.data, module.package]
            for other in known:
                if id(other) not in running and any(overlaps(t, other.package) for t in targets):
                    running[id(other)] = other
                    pending.append(other)
        chosen = list(running.values())
        if any(m.rewrites for m in chosen):
            return None
        aliases = [((*m.package, name), target) for m in known for name, target in m.aliases]
        referenced = [target + ref[len(rule):] if ref[:len(rule)] == rule else target
                      for m in chosen for ref in m.data for rule, target in aliases if overlaps(ref, rule)]
        return projection_of([*AGGREGATE_READS, *(path for m in chosen for path in m.inputs), *referenced],
                             deterministic=not any(m.impure for m in chosen))


__all__ = [
    "AGGREGATE_READS", "WHOLE", "InputReads", "ModuleReads", "Projection", "module_reads",
    "projection_of", "reads_of_modules",
]
