"""What a Rego module's names stand for while its reads are found (policies/engines/rego_reads.py): the
input, `data`, imports, aliases and the members of input collections bound to local variables; what
has been found so far; and the constant paths a reference spells.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from policies.engines.projection import EACH, WHOLE, Path
from policies.engines.rego_ast import leading, references, static_key, unchain, var

Root = tuple[str, Path]  # ("input" or "data", the path a name stands for)
# The root of a function parameter's reads while its function is summarised (`Functions` in rego_read_walk.py): never an
# input key, and the summary keeps only what lies below it.
PARAM = "[param]"


class FunctionSummaries(Protocol):
    """What each package function reads of its parameters (`Functions` in rego_read_walk.py)."""

    def defines(self, path: Path) -> bool: ...

    def summary(self, path: Path | None, arity: int) -> tuple[frozenset[Path] | None, ...] | None: ...


class Found:
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
class Scope:
    """What a module's names stand for: `input`, `data`, its imports, its package's aliases, and the
    local variables bound to members of an input collection (`some c in ...`: name -> the paths of the
    member, each a collection's path and `EACH`). `collections`: every package's collection rules by
    their path below `data` (`_collections` in rego_reads.py); `functions`: the summaries of package
    functions."""

    imports: dict[str, Root]
    aliases: dict[str, Path]
    package: Path = ()
    members: Mapping[str, frozenset[Path]] = field(default_factory=dict)
    collections: Mapping[Path, frozenset[Path]] = field(default_factory=dict)
    functions: FunctionSummaries | None = None
    # Answers of `input_sources` and `bindings` (rego_read_walk.py) by (node, the member variables in
    # scope that it names), for one reading of a set: nested comprehensions ask about the same inner nodes
    # from every level and every round of an outer fixpoint (exponential in the nesting otherwise); and
    # the names each node uses.
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

    def with_members(self, bound: Mapping[str, frozenset[Path]]) -> Scope:
        if not bound:
            return self
        members = dict(self.members)
        for name, paths in bound.items():
            members[name] = members.get(name, frozenset()) | paths
        return replace(self, members=members)

    def rule_collection(self, name: str | None) -> frozenset[Path] | None:
        """The sources of the package's collection rule `name` (a bare name may stand for one)."""
        return None if name is None else self.collections.get((*self.package, name))


def constant_paths(node: Any, scope: Scope) -> list[Path] | None:
    """The input paths `node` names when it is `input`, an input name or member, or a chain of constant
    steps on one (nothing computed on the way, no other meaning of its root), else None."""
    root, keys, indexes = unchain(node)
    roots = scope.roots(root)
    if not roots or any(kind != "input" for kind, _ in roots) or indexes or any(k is None for k in keys):
        return None
    return [base + tuple(k for k in keys if k is not None) for _, base in roots]


def constant_path(node: Any, scope: Scope) -> Path | None:
    """`constant_paths` when there is exactly one."""
    paths = constant_paths(node, scope)
    return paths[0] if paths is not None and len(paths) == 1 else None


def literal_keys(node: Any) -> list[str] | None:
    """The keys of `object.get`'s second argument when it is a string literal or an array of them."""
    key = static_key(node)
    if key is not None:
        return [key]
    items = node.get("Array", {}).get("items") if isinstance(node, dict) and len(node) == 1 else None
    if not isinstance(items, list):
        return None
    keys = [static_key(item) for item in items]
    return None if any(k is None for k in keys) else [k for k in keys if k is not None]


def merge(found: Found, other: Found) -> None:
    found.inputs |= other.inputs
    found.data |= other.data
    found.impure |= other.impure
    found.rewrites = found.rewrites or other.rewrites


def constant(node: Any) -> bool:
    """Whether `node` is a literal that holds no variable (a constant default)."""
    return not any(True for _ in references(node))


def remembered(node: Any, scope: Scope, compute: Callable[[Any, Scope], Any]) -> Any:
    names = scope.named.get(id(node))
    if names is None:
        names = scope.named[id(node)] = frozenset(name for name, _, _ in references(node))
    members = scope.members
    key = (id(node), frozenset((name, members[name]) for name in names if name in members))
    if key not in scope.known:
        scope.known[key] = compute(node, scope)
    return scope.known[key]


def some_in(statement: Any) -> Mapping[str, Any] | None:
    literal = statement.get("literal") if isinstance(statement, dict) else None
    some = literal.get("SomeIn") if isinstance(literal, dict) and len(literal) == 1 else None
    return some if isinstance(some, dict) else None
