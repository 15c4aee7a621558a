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
call a built-in that reads the clock, randomness or the network (`IMPURE_BUILTINS`) is projected but
never remembered.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from policies.engines.aggregate import AGGREGATE_PACKAGE
from policies.engines.projection import EACH, NOTHING, WHOLE, Path, Projection, overlaps, projection_of
from policies.engines.rego_ast import (
    REFS,
    document_imports,
    dotted,
    head_name,
    leading,
    package_path,
    parse_module,
    references,
    static_key,
    unchain,
    var,
)
from policies.engines.rego_rvm import RVM_PACKAGE

log = logging.getLogger("kgwe.policies")

# Built-ins whose answer is not a function of their arguments (clock, randomness, network, runtime).
IMPURE_BUILTINS = frozenset({
    "time.now_ns", "rand.intn", "uuid.rfc4122", "http.send", "net.lookup_ip_addr", "opa.runtime",
    "io.jwt.decode_verify", "crypto.x509.parse_and_verify_certificates",
    "crypto.x509.parse_and_verify_certificates_with_options",
})
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

Root = tuple[str, Path]  # ("input" or "data", the path a name stands for)
# The root of a function parameter's reads while its function is summarised (`_Functions`): never an
# input key, and the summary keeps only what lies below it.
_PARAM = "[param]"


class _Found:
    def __init__(self) -> None:
        self.inputs: set[Path] = set()
        self.data: set[Path] = set()
        self.rewrites = False
        self.impure: set[str] = set()

    def record(self, roots: list[Root], keys: list[str | None] | Path) -> None:
        """A reference from `roots` through `keys` (None: a computed step). Below the input a computed
        step reads every member there (`containers[i].image`: each container's image); below `data` it
        ends the path (which packages it may reach is what counts there)."""
        for kind, base in roots:
            if kind == "input":
                self.inputs.add(base + tuple(EACH if k is None else k for k in keys))
            else:
                self.data.add(base + leading(list(keys)))


@dataclass
class _Scope:
    """What a module's names stand for: `input`, `data`, its imports, its package's aliases, and the
    local variables bound to members of an input collection (`some c in ...`: name -> the paths of the
    member, each a collection's path and `EACH`). `collections`: every package's collection rules by
    their path below `data` (`_collections`); `functions`: the summaries of package functions."""

    imports: dict[str, Root]
    aliases: dict[str, Path]
    package: Path = ()
    members: Mapping[str, frozenset[Path]] = field(default_factory=dict)
    collections: Mapping[Path, frozenset[Path]] = field(default_factory=dict)
    functions: _Functions | None = None
    # Answers of `_sources` and `_bindings` by (node, the member variables in scope that it names), for
    # one reading of a set: nested comprehensions ask about the same inner nodes from every level and
    # every round of an outer fixpoint (exponential in the nesting otherwise); and the names each node uses.
    known: dict[tuple[int, frozenset[tuple[str, frozenset[Path]]]], Any] = field(default_factory=dict)
    named: dict[int, frozenset[str]] = field(default_factory=dict)

    def roots(self, node: Any) -> list[Root]:
        name = var(node)
        if name is None:
            return []
        if name in ("input", "data"):
            return [(name, WHOLE)]
        found = []
        if name in self.imports:
            found.append(self.imports[name])
        if name in self.aliases:  # also an import of the same name: both, to be sure
            found.append(("input", self.aliases[name]))
        # A member variable too: a local that shadows an import or alias only adds reads.
        found.extend(("input", member) for member in self.members.get(name, ()))
        return found

    def with_members(self, bound: Mapping[str, frozenset[Path]]) -> _Scope:
        if not bound:
            return self
        members = dict(self.members)
        for name, paths in bound.items():
            members[name] = members.get(name, frozenset()) | paths
        return replace(self, members=members)

    def rule_collection(self, name: str | None) -> frozenset[Path] | None:
        """The sources of the package's collection rule `name` (a bare name may stand for one)."""
        return None if name is None else self.collections.get((*self.package, name))


def _constant_paths(node: Any, scope: _Scope) -> list[Path] | None:
    """The input paths `node` names when it is `input`, an input name or member, or a chain of constant
    steps on one (nothing computed on the way, no other meaning of its root), else None."""
    root, keys, indexes = unchain(node)
    roots = scope.roots(root)
    if not roots or any(kind != "input" for kind, _ in roots) or indexes or any(k is None for k in keys):
        return None
    return [base + tuple(k for k in keys if k is not None) for _, base in roots]


def _constant_path(node: Any, scope: _Scope) -> Path | None:
    """`_constant_paths` when there is exactly one."""
    paths = _constant_paths(node, scope)
    return paths[0] if paths is not None and len(paths) == 1 else None


def _literal_keys(node: Any) -> list[str] | None:
    """The keys of `object.get`'s second argument when it is a string literal or an array of them."""
    key = static_key(node)
    if key is not None:
        return [key]
    items = node.get("Array", {}).get("items") if isinstance(node, dict) and len(node) == 1 else None
    if not isinstance(items, list):
        return None
    keys = [static_key(item) for item in items]
    return None if any(k is None for k in keys) else [k for k in keys if k is not None]


def _object_get_paths(call: Any, scope: _Scope, found: _Found) -> list[Path] | None:
    """For `object.get(<input path>, "b", default)` (or `["b", "c"]`): the input paths it reads (`.b`,
    `.b.c`), its default walked as any expression; None for any other call (nothing walked)."""
    if not isinstance(call, dict) or dotted(call.get("fcn")) != "object.get":
        return None
    params = call.get("params")
    if not isinstance(params, list) or len(params) != 3:
        return None
    keys = _literal_keys(params[1])
    if keys is None:
        return None
    target = params[0]
    if isinstance(target, dict) and len(target) == 1 and "Call" in target:
        # object.get(object.get(input, "a", {}), "b", x): the inner call's path, one level deeper.
        inner = _Found()
        paths = _object_get_paths(target["Call"], scope, inner)
        if paths is None or inner.inputs:
            return None  # an inner default that reads the input: walked as a whole instead
        _merge(found, inner)
    else:
        paths = _constant_paths(target, scope)
        if paths is None:
            return None
    _walk(params[2], scope, found)
    return [path + tuple(keys) for path in paths]


def _merge(found: _Found, other: _Found) -> None:
    found.inputs |= other.inputs
    found.data |= other.data
    found.impure |= other.impure
    found.rewrites = found.rewrites or other.rewrites


# -- collections and their members --------------------------------------------------------------------
#
# `some c in <collection>` binds `c` to a member; where the collection's members are members of input
# collections, `c.image` reads `<collection>[*].image` (EACH) rather than the whole collection. A
# collection is an input path, a member's path, `object.get` of one with a constant default, an
# `array.concat` of collections, an array comprehension whose term is its own member variable, or a
# collection rule (below). Anything else is no collection: walked as before, it reads whole.
# Not a set comprehension: a set of members is deduplicated by their whole values.


def _constant(node: Any) -> bool:
    """Whether `node` is a literal that holds no variable (a constant default)."""
    return not any(True for _ in references(node))


def _remembered(node: Any, scope: _Scope, compute: Callable[[Any, _Scope], Any]) -> Any:
    names = scope.named.get(id(node))
    if names is None:
        names = scope.named[id(node)] = frozenset(name for name, _, _ in references(node))
    members = scope.members
    key = (id(node), frozenset((name, members[name]) for name in names if name in members))
    if key not in scope.known:
        scope.known[key] = compute(node, scope)
    return scope.known[key]


def _sources(node: Any, scope: _Scope) -> frozenset[Path] | None:
    """The input collections whose members are exactly the members of `node`'s value, or None."""
    return _remembered(node, scope, _sources_of)  # type: ignore[no-any-return]


def _sources_of(node: Any, scope: _Scope) -> frozenset[Path] | None:
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
        if called == "object.get" and len(params) == 3 and _constant(params[2]):
            literal = _literal_keys(params[1])
            paths = _constant_paths(params[0], scope)
            if literal is None or paths is None:
                return None
            return frozenset(path + tuple(literal) for path in paths)
        if called == "array.concat" and len(params) == 2:
            parts = [_sources(p, scope) for p in params]
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


def _some_in(statement: Any) -> Mapping[str, Any] | None:
    literal = statement.get("literal") if isinstance(statement, dict) else None
    some = literal.get("SomeIn") if isinstance(literal, dict) and len(literal) == 1 else None
    return some if isinstance(some, dict) else None


def _bindings(query: Any, scope: _Scope) -> dict[str, frozenset[Path]]:
    """The member variables a query binds (`some c in <collection>`), to a fixpoint: a collection may be
    a member's path bound by another statement (`some c in X; some e in c.env`)."""
    return dict(_remembered(query, scope, _bindings_of))


def _bindings_of(query: Any, scope: _Scope) -> dict[str, frozenset[Path]]:
    statements = query.get("stmts") if isinstance(query, dict) else None
    if not isinstance(statements, list):
        return {}
    bound: dict[str, frozenset[Path]] = {}
    for _ in range(len(statements) + 1):
        changed = False
        inner = scope.with_members(bound)
        for statement in statements:
            some = _some_in(statement)
            name = var(some.get("value")) if some is not None else None
            if some is None or name is None:
                continue
            sources = _sources(some.get("collection"), inner)
            if sources is None:
                continue
            members = frozenset((*source, EACH) for source in sources)
            if not members <= bound.get(name, frozenset()):
                bound[name] = bound.get(name, frozenset()) | members
                changed = True
        if not changed:
            break
    return bound


def _walk_collection(node: Any, scope: _Scope, found: _Found) -> bool:
    """For a collection iterated or counted: its members' presence (`EACH`, `NOTHING`) and what its
    making reads, its members' contents left to their variables. False (nothing recorded) when `node`
    is no collection."""
    sources = _sources(node, scope)
    if sources is None:
        return False
    for source in sources:
        found.inputs.add((*source, EACH, NOTHING))
    _walk_collection_parts(node, scope, found)
    return True


def _walk_collection_parts(node: Any, scope: _Scope, found: _Found) -> None:
    """What making a collection (`_sources` knows it) reads besides its members."""
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


def _walk_some_in(some: Mapping[str, Any], scope: _Scope, found: _Found) -> None:
    value, key, collection = some.get("value"), some.get("key"), some.get("collection")
    name = var(value)
    members = _sources(collection, scope) if name is not None else None
    # The variable must hold what the query bound it to (`_bindings`); else the collection reads whole.
    if (members is None or not frozenset((*m, EACH) for m in members) <= scope.members.get(name or "", frozenset())
            or not _walk_collection(collection, scope, found)):
        _walk(collection, scope, found)
    # A variable declared here is no read; a pattern (`some [a, b] in x`) is walked as any expression.
    for part in (value, key):
        if part is not None and var(part) is None:
            _walk(part, scope, found)


def _walk_query(query: Any, scope: _Scope, found: _Found) -> None:
    """A query's statements, with the member variables it binds (on top of the enclosing ones)."""
    inner = scope.with_members(_bindings(query, scope))
    for statement in query.get("stmts") or []:
        if not isinstance(statement, dict):
            continue
        if statement.get("with_mods"):
            found.rewrites = True
        some = _some_in(statement)
        if some is not None:
            _walk_some_in(some, inner, found)
        else:
            _walk(statement, inner, found)


def _rule_bindings(rule: Any, scope: _Scope) -> dict[str, frozenset[Path]]:
    """The member variables of a rule's bodies: its head (`names contains c.name if { some c in x }`)
    sees them."""
    bound: dict[str, frozenset[Path]] = {}
    spec = rule.get("Spec") if isinstance(rule, dict) else None
    for body in (spec.get("bodies") or []) if isinstance(spec, dict) else []:
        for name, paths in _bindings(body.get("query") if isinstance(body, dict) else None, scope).items():
            bound[name] = bound.get(name, frozenset()) | paths
    return bound


def _reached_collections(root: Any, roots: list[Root], keys: list[str | None], scope: _Scope) -> set[Path]:
    """The sources of every collection rule a reference may reach (its whole value, or a member of it)."""
    reached: set[Path] = set(scope.rule_collection(var(root)) or ())
    for kind, base in roots:
        if kind == "data":
            path = base + leading(keys)
            for rule, sources in scope.collections.items():
                if overlaps(path, rule):
                    reached |= sources
    return reached


def _walk_call(call: Mapping[str, Any], scope: _Scope, found: _Found) -> bool:
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
        return _walk_collection(params[0], scope, found)
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


def _function_path(fcn: Any, scope: _Scope) -> Path | None:
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


def _walk(node: Any, scope: _Scope, found: _Found) -> None:
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


def _walk_rule(rule: Any, scope: _Scope, found: _Found, *, skip_args: bool = False) -> None:
    """A rule, its head seeing its bodies' member variables; `skip_args`: not a function's parameters
    (they are bound by the caller, `_Functions`)."""
    inner = scope.with_members(_rule_bindings(rule, scope))
    spec = rule.get("Spec") if isinstance(rule, dict) and len(rule) == 1 else None
    if not skip_args or not isinstance(spec, dict):
        _walk(rule, inner, found)
        return
    head = spec.get("head") or {}
    func = head.get("Func") if isinstance(head, dict) else None
    _walk(func.get("assign") if isinstance(func, dict) else head, inner, found)
    _walk(spec.get("bodies"), inner, found)


class _Functions:
    """What each package function reads of its parameters: per parameter, the paths below it (a bare use
    reads it whole, `()`), or None where that is not known (a pattern parameter, a recursive call)."""

    def __init__(self, definitions: Mapping[Path, list[tuple[Any, _Scope]]]) -> None:
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
                params[name] = params.get(name, frozenset()) | {(_PARAM, str(index))}
            found = _Found()
            _walk_rule(rule, scope.with_members(params), found, skip_args=True)
            for index in range(len(args)):
                if index in reads and reads[index] is None:
                    continue
                below = {p[2:] for p in found.inputs if p[:2] == (_PARAM, str(index))}
                reads[index] = (reads.get(index) or set()) | below
        if len(arities) != 1:
            return None
        return tuple(None if reads.get(i) is None else frozenset(reads[i] or ()) for i in range(arities.pop()))


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
            path = _constant_path(value, _Scope(module.imports, {k: v for k, v in resolved.items() if k != name}))
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
            scope = _Scope(module.imports, package_aliases, module.package,
                           collections={k: v for k, v in resolved.items() if k != path})
            sources = _sources(value, scope)
            if sources is not None:
                resolved[path] = sources
                progress = True
        if not progress:
            break
    return resolved


def _reads(module: _Parsed, scope: _Scope) -> ModuleReads:
    found = _Found()
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
                and _walk_collection(_alias_value(rule), scope, found):
            continue
        _walk_rule(rule, scope, found)
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
    parsed = {name: _parse_or_none(name, source) for name, source in modules.items()}
    packages: dict[Path, list[_Parsed]] = {}
    for module in parsed.values():
        if module is not None:
            packages.setdefault(module.package, []).append(module)
    aliases = {package: _aliases(members) for package, members in packages.items()}
    collections = _collections(packages, aliases)
    definitions: dict[Path, list[tuple[Any, _Scope]]] = {}
    functions = _Functions(definitions)
    scopes: dict[int, _Scope] = {}
    for module in (m for m in parsed.values() if m is not None):
        scope = scopes[id(module)] = _Scope(module.imports, aliases[module.package], module.package,
                                            collections=collections, functions=functions)
        for rule in module.ast.get("rules") or []:
            head = (rule.get("Spec") or {}).get("head") if isinstance(rule, dict) else None
            name = head_name(rule)
            if isinstance(head, dict) and "Func" in head and name is not None:
                definitions.setdefault((*module.package, name), []).append((rule, scope))
    return {name: None if module is None else _reads(module, scopes[id(module)])
            for name, module in parsed.items()}


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
    "AGGREGATE_READS", "IMPURE_BUILTINS", "WHOLE", "InputReads", "ModuleReads", "Projection", "module_reads",
    "projection_of", "reads_of_modules",
]
