"""The walk over a Rego module's syntax tree that finds what it reads of the input and of `data`
(policies/engines/rego_reads.py): references, calls (package functions summarised by what they read of
their parameters), comprehensions and the local variables bound to input collections.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from policies.engines.projection import EACH, NOTHING, Path, overlaps
from policies.engines.rego_ast import REFS, dotted, leading, unchain, var
from policies.engines.rego_read_scope import (
    PARAM,
    Found,
    Root,
    Scope,
    constant,
    constant_paths,
    literal_keys,
    merge,
    remembered,
    some_in,
)

# Built-ins whose answer is not a function of their arguments (clock, randomness, network, runtime).
IMPURE_BUILTINS = frozenset({
    "time.now_ns", "rand.intn", "uuid.rfc4122", "http.send", "net.lookup_ip_addr", "opa.runtime",
    "io.jwt.decode_verify", "crypto.x509.parse_and_verify_certificates",
    "crypto.x509.parse_and_verify_certificates_with_options",
})


def _object_get_paths(call: Any, scope: Scope, found: Found) -> list[Path] | None:
    """For `object.get(<input path>, "b", default)` (or `["b", "c"]`): the input paths it reads (`.b`,
    `.b.c`), its default walked as any expression; None for any other call (nothing walked)."""
    if not isinstance(call, dict) or dotted(call.get("fcn")) != "object.get":
        return None
    params = call.get("params")
    if not isinstance(params, list) or len(params) != 3:
        return None
    keys = literal_keys(params[1])
    if keys is None:
        return None
    target = params[0]
    if isinstance(target, dict) and len(target) == 1 and "Call" in target:
        # object.get(object.get(input, "a", {}), "b", x): the inner call's path, one level deeper.
        inner = Found()
        paths = _object_get_paths(target["Call"], scope, inner)
        if paths is None or inner.inputs:
            return None  # an inner default that reads the input: walked as a whole instead
        merge(found, inner)
    else:
        paths = constant_paths(target, scope)
        if paths is None:
            return None
    _walk(params[2], scope, found)
    return [path + tuple(keys) for path in paths]


def input_sources(node: Any, scope: Scope) -> frozenset[Path] | None:
    """The input collections whose members are exactly the members of `node`'s value, or None."""
    return remembered(node, scope, _sources_of)  # type: ignore[no-any-return]


def _sources_of(node: Any, scope: Scope) -> frozenset[Path] | None:
    if not isinstance(node, dict) or len(node) != 1:
        return None
    kind, body = next(iter(node.items()))
    if kind in REFS or kind == "Var":
        root, keys, indexes = unchain(node)
        if indexes or any(k is None for k in keys):
            return None
        steps = tuple(k for k in keys if k is not None)
        found: set[Path] = set()
        for root_kind, base in scope.roots(root):
            if root_kind == "input":
                found.add(base + steps)
                continue
            collection = scope.collections.get(base + steps)
            if collection is None:
                return None  # some other document: its members are not known
            found |= collection
        # A bare name may also be the package's collection rule: both, to be sure (a step into one is
        # no collection known).
        own = scope.rule_collection(var(root))
        if own is not None:
            if steps:
                return None
            found |= own
        return frozenset(found) if found else None
    if kind == "Call" and isinstance(body, dict):
        called, params = dotted(body.get("fcn")), body.get("params")
        if not isinstance(params, list):
            return None
        if called == "object.get" and len(params) == 3 and constant(params[2]):
            literal = literal_keys(params[1])
            paths = constant_paths(params[0], scope)
            if literal is None or paths is None:
                return None
            return frozenset(path + tuple(literal) for path in paths)
        if called == "array.concat" and len(params) == 2:
            parts = [input_sources(p, scope) for p in params]
            return None if parts[0] is None or parts[1] is None else parts[0] | parts[1]
        return None
    if kind == "ArrayCompr" and isinstance(body, dict):
        term = var(body.get("term"))
        query = body.get("query")
        bound = _bindings(query, scope) if term is not None else {}
        if term is None or term not in bound:
            return None
        return frozenset(member[:-1] for member in bound[term])  # a member's path ends in EACH
    return None


def _bindings(query: Any, scope: Scope) -> dict[str, frozenset[Path]]:
    """The member variables a query binds (`some c in <collection>`), to a fixpoint: a collection may be
    a member's path bound by another statement (`some c in X; some e in c.env`)."""
    return dict(remembered(query, scope, _bindings_of))


def _bindings_of(query: Any, scope: Scope) -> dict[str, frozenset[Path]]:
    statements = query.get("stmts") if isinstance(query, dict) else None
    if not isinstance(statements, list):
        return {}
    bound: dict[str, frozenset[Path]] = {}
    for _ in range(len(statements) + 1):
        changed = False
        inner = scope.with_members(bound)
        for statement in statements:
            some = some_in(statement)
            name = var(some.get("value")) if some is not None else None
            if some is None or name is None:
                continue
            sources = input_sources(some.get("collection"), inner)
            if sources is None:
                continue
            members = frozenset((*source, EACH) for source in sources)
            if not members <= bound.get(name, frozenset()):
                bound[name] = bound.get(name, frozenset()) | members
                changed = True
        if not changed:
            break
    return bound


def walk_collection(node: Any, scope: Scope, found: Found) -> bool:
    """For a collection iterated or counted: its members' presence (`EACH`, `NOTHING`) and what its
    making reads, its members' contents left to their variables. False (nothing recorded) when `node`
    is no collection."""
    sources = input_sources(node, scope)
    if sources is None:
        return False
    for source in sources:
        found.inputs.add((*source, EACH, NOTHING))
    _walk_collection_parts(node, scope, found)
    return True


def _walk_collection_parts(node: Any, scope: Scope, found: Found) -> None:
    """What making a collection (`sources` knows it) reads besides its members."""
    kind, body = next(iter(node.items()))
    if kind in REFS or kind == "Var":
        root, keys, _ = unchain(node)
        found.record([r for r in scope.roots(root) if r[0] == "data"], keys)  # which packages it reaches
    elif kind == "Call":
        called = dotted(body.get("fcn"))
        if called == "array.concat":
            for part in body["params"]:
                _walk_collection_parts(part, scope, found)
        # else object.get of an input path with a constant default: nothing more to read
    else:  # an array comprehension: its query (conditions, other variables), not its term (the member)
        query = body["query"]
        _walk_query(query, scope.with_members(_bindings(query, scope)), found)


def _walk_some_in(some: Mapping[str, Any], scope: Scope, found: Found) -> None:
    value, key, collection = some.get("value"), some.get("key"), some.get("collection")
    name = var(value)
    members = input_sources(collection, scope) if name is not None else None
    # The variable must hold what the query bound it to (`_bindings`); else the collection reads whole.
    if (members is None or not frozenset((*m, EACH) for m in members) <= scope.members.get(name or "", frozenset())
            or not walk_collection(collection, scope, found)):
        _walk(collection, scope, found)
    # A variable declared here is no read; a pattern (`some [a, b] in x`) is walked as any expression.
    for part in (value, key):
        if part is not None and var(part) is None:
            _walk(part, scope, found)


def _walk_query(query: Any, scope: Scope, found: Found) -> None:
    """A query's statements, with the member variables it binds (on top of the enclosing ones)."""
    inner = scope.with_members(_bindings(query, scope))
    for statement in query.get("stmts") or []:
        if not isinstance(statement, dict):
            continue
        if statement.get("with_mods"):
            found.rewrites = True
        some = some_in(statement)
        if some is not None:
            _walk_some_in(some, inner, found)
        else:
            _walk(statement, inner, found)


def _rule_bindings(rule: Any, scope: Scope) -> dict[str, frozenset[Path]]:
    """The member variables of a rule's bodies: its head (`names contains c.name if { some c in x }`)
    sees them."""
    bound: dict[str, frozenset[Path]] = {}
    spec = rule.get("Spec") if isinstance(rule, dict) else None
    for body in (spec.get("bodies") or []) if isinstance(spec, dict) else []:
        for name, paths in _bindings(body.get("query") if isinstance(body, dict) else None, scope).items():
            bound[name] = bound.get(name, frozenset()) | paths
    return bound


def _reached_collections(root: Any, roots: list[Root], keys: list[str | None], scope: Scope) -> set[Path]:
    """The sources of every collection rule a reference may reach (its whole value, or a member of it)."""
    reached: set[Path] = set(scope.rule_collection(var(root)) or ())
    for kind, base in roots:
        if kind == "data":
            path = base + leading(keys)
            for rule, sources in scope.collections.items():
                if overlaps(path, rule):
                    reached |= sources
    return reached


def _walk_call(call: Mapping[str, Any], scope: Scope, found: Found) -> bool:
    """The calls read otherwise than their parts: `object.get` of an input path, `count` of a collection,
    a package function given member variables. False for any other call."""
    called = dotted(call.get("fcn"))
    params = call.get("params")
    if not isinstance(params, list):
        return False
    paths = _object_get_paths(call, scope, found)
    if paths is not None:
        found.inputs.update(paths)
        return True
    if called == "count" and len(params) == 1 and scope.functions is not None \
            and not scope.functions.defines((*scope.package, "count")):
        return walk_collection(params[0], scope, found)
    if scope.functions is None or not any(var(p) in scope.members for p in params):
        return False
    summary = scope.functions.summary(_function_path(call.get("fcn"), scope), len(params))
    if summary is None:
        return False
    _walk(call.get("fcn"), scope, found)  # which package it is in
    for param, reads in zip(params, summary, strict=True):
        name = var(param)
        if name is None or name not in scope.members or reads is None:
            _walk(param, scope, found)
            continue
        for member in scope.members[name]:
            found.inputs.update(member + read for read in reads)
        # The name's other meanings (an import, an alias it shadows) are read whole.
        found.record([r for r in replace(scope, members={}).roots(param)], [])
    return True


def _function_path(fcn: Any, scope: Scope) -> Path | None:
    """The path below `data` of the function a call names (a bare name: the module's package)."""
    root, keys, indexes = unchain(fcn)
    name = var(root)
    if name is None or indexes or any(k is None for k in keys):
        return None
    steps = tuple(k for k in keys if k is not None)
    if name == "data":
        return steps
    if name in scope.imports and scope.imports[name][0] == "data":
        return scope.imports[name][1] + steps
    return (*scope.package, name, *steps) if name not in scope.imports else None


def _walk(node: Any, scope: Scope, found: Found) -> None:
    if isinstance(node, list):
        for item in node:
            _walk(item, scope, found)
        return
    if not isinstance(node, dict):
        return
    if node.get("with_mods"):
        found.rewrites = True
    if "stmts" in node:
        _walk_query(node, scope, found)
        return
    if len(node) == 1:
        kind = next(iter(node))
        if kind in REFS:
            root, keys, indexes = unchain(node)
            roots = scope.roots(root)
            if roots:
                found.record(roots, keys)
            else:
                _walk(root, scope, found)
            found.inputs.update(_reached_collections(root, roots, keys, scope))
            _walk(indexes, scope, found)
            return
        if var(node) is not None:
            roots = scope.roots(node)
            found.record(roots, [])
            found.inputs.update(_reached_collections(node, roots, [], scope))
            return
        if kind == "Call" and isinstance(node["Call"], dict):
            called = dotted(node["Call"].get("fcn"))
            if called in IMPURE_BUILTINS:
                found.impure.add(called)
            if _walk_call(node["Call"], scope, found):
                return
        if kind in ("ArrayCompr", "SetCompr", "ObjectCompr") and isinstance(node[kind], dict):
            query = node[kind].get("query")
            inner = scope.with_members(_bindings(query, scope))
            for part in node[kind].values():
                _walk(part, inner, found)
            return
    for value in node.values():
        _walk(value, scope, found)


def walk_rule(rule: Any, scope: Scope, found: Found, *, skip_args: bool = False) -> None:
    """A rule, its head seeing its bodies' member variables; `skip_args`: not a function's parameters
    (they are bound by the caller, `Functions`)."""
    inner = scope.with_members(_rule_bindings(rule, scope))
    spec = rule.get("Spec") if isinstance(rule, dict) and len(rule) == 1 else None
    if not skip_args or not isinstance(spec, dict):
        _walk(rule, inner, found)
        return
    head = spec.get("head") or {}
    func = head.get("Func") if isinstance(head, dict) else None
    _walk(func.get("assign") if isinstance(func, dict) else head, inner, found)
    _walk(spec.get("bodies"), inner, found)


class Functions:
    """What each package function reads of its parameters: per parameter, the paths below it (a bare use
    reads it whole, `()`), or None where that is not known (a pattern parameter, a recursive call)."""

    def __init__(self, definitions: Mapping[Path, list[tuple[Any, Scope]]]) -> None:
        self._definitions = definitions
        self._summaries: dict[Path, tuple[frozenset[Path] | None, ...] | None] = {}
        self._open: set[Path] = set()

    def defines(self, path: Path) -> bool:
        return path in self._definitions

    def summary(self, path: Path | None, arity: int) -> tuple[frozenset[Path] | None, ...] | None:
        if path is None or path not in self._definitions or path in self._open:
            return None  # not a package function, or one that calls itself: its arguments read whole
        if path not in self._summaries:
            self._open.add(path)
            try:
                self._summaries[path] = self._summarise(path)
            finally:
                self._open.discard(path)
        summary = self._summaries[path]
        return summary if summary is not None and len(summary) == arity else None

    def _summarise(self, path: Path) -> tuple[frozenset[Path] | None, ...] | None:
        arities = set()
        reads: dict[int, set[Path] | None] = {}
        for rule, scope in self._definitions[path]:
            head = (rule.get("Spec") or {}).get("head") or {}
            args = (head.get("Func") or {}).get("args") if isinstance(head, dict) else None
            if not isinstance(args, list):
                return None
            arities.add(len(args))
            params: dict[str, frozenset[Path]] = {}
            for index, arg in enumerate(args):
                name = var(arg)
                if name is None:
                    reads[index] = None  # a pattern parameter: what it takes apart is not followed
                    continue
                params[name] = params.get(name, frozenset()) | {(PARAM, str(index))}
            found = Found()
            walk_rule(rule, scope.with_members(params), found, skip_args=True)
            for index in range(len(args)):
                if index in reads and reads[index] is None:
                    continue
                below = {p[2:] for p in found.inputs if p[:2] == (PARAM, str(index))}
                reads[index] = (reads.get(index) or set()) | below
        if len(arities) != 1:
            return None
        return tuple(None if reads.get(i) is None else frozenset(reads[i] or ()) for i in range(arities.pop()))
