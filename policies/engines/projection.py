"""A document cut to the paths some readers can read (a path keeps everything below it).

The readers are policies: Rego modules (policies/engines/rego_reads.py), CEL expressions
(policies/engines/cel_reads.py), GPUPolicy match rules. A projection only removes keys, never changes a
value, and keeps an object on the way to a kept path even when nothing of it is kept, so that what a
reader can reach is exactly what the whole document holds there.

A step `EACH` stands for every member of a collection: each element of an array, each value of an
object (Rego's `some c in x` and CEL's `x.all(c, ...)` iterate either). `spec.containers[*].image` keeps
every container, in order, each with its `image` only; an array stays as long as it was, an object
keeps every key. Where one node is read both through `EACH` and through named keys, the node is kept
whole: the simple answer, never a smaller one. `NOTHING` after `EACH` keeps the members but none of
their keys (a count of them).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

Path = tuple[str, ...]
WHOLE: Path = ()  # the path of a read of the whole document
# Every member of a collection. Never looked up as a key: a document key spelled so is kept like any
# other member (a read of that key alone would keep no more than this keeps).
EACH = "[*]"
# A key no reader reads: `(*collection, EACH, NOTHING)` keeps every member and none of its keys, for a
# reader that only counts the members (a document key spelled so is kept, which only keeps more).
NOTHING = "[-]"


class Each:
    """The node of an `EACH` step: `below` applies to every member."""

    __slots__ = ("below",)

    def __init__(self, below: Tree | Each) -> None:
        self.below = below

    def __repr__(self) -> str:
        return f"Each({self.below!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Each) and other.below == self.below

    def __hash__(self) -> int:
        return hash(("each", repr(self.below)))


Tree = dict[str, "Tree | Each | None"]  # None below a key: the whole subtree


def trimmed(path: Path) -> Path:
    """`path` without trailing `EACH` steps: every member whole is the collection whole."""
    end = len(path)
    while end and path[end - 1] == EACH:
        end -= 1
    return path[:end]


def _raw_tree(paths: Iterable[Path]) -> Tree | None:
    tree: Tree = {}
    for path in sorted({trimmed(p) for p in paths}, key=len):
        if path == WHOLE:
            return None
        node: Any = tree
        for key in path[:-1]:
            if node is None:
                break
            node = node.setdefault(key, {})
        if node is not None:
            node[path[-1]] = None
    return tree


def _settled(node: Tree) -> Tree | Each | None:
    """`node` with its `EACH` keys turned into `Each` nodes; None where a node mixes `EACH` with named keys."""
    settled: Tree = {key: (_settled(below) if isinstance(below, dict) else below) for key, below in node.items()}
    if EACH not in settled:
        return settled
    if len(settled) > 1:
        return None
    below = settled[EACH]
    return None if below is None else Each(below)


def _tree(paths: Iterable[Path]) -> Tree | None:
    """The paths as a key tree, or None when one of them is the whole document (or reaches it through
    `EACH` at the top, a document being an object of named keys)."""
    raw = _raw_tree(paths)
    if raw is None:
        return None
    settled = _settled(raw)
    return settled if isinstance(settled, dict) else None


def _cut(value: Any, below: Tree | Each) -> Any:
    if isinstance(below, Each):
        inner = below.below
        if type(value) is list:
            return [_cut(member, inner) for member in value]
        if type(value) is dict:
            return {key: _cut(member, inner) for key, member in value.items()}
        return value
    return _apply(value, below) if isinstance(value, dict) else value


def _apply(document: Mapping[str, Any], tree: Tree) -> dict[str, Any]:
    kept: dict[str, Any] = {}
    for key, below in tree.items():
        if key not in document:
            continue
        value = document[key]
        kept[key] = value if below is None else _cut(value, below)
    return kept


@dataclass(frozen=True)
class Projection:
    """The part of a document its readers can read."""

    tree: Tree
    deterministic: bool  # no reader reads the clock, randomness or the network: an answer may be remembered
    paths: frozenset[Path] = frozenset()

    def apply(self, document: Mapping[str, Any]) -> dict[str, Any]:
        return _apply(document, self.tree)

    def widened(self, paths: Iterable[Path]) -> Projection | None:
        """This projection with `paths` read too (None when they reach the whole document)."""
        return projection_of([*self.paths, *paths], deterministic=self.deterministic)


def projection_of(paths: Iterable[Path], *, deterministic: bool = True) -> Projection | None:
    """The projection keeping `paths`, or None when one of them is the whole document."""
    chosen = frozenset(paths)
    tree = _tree(chosen)
    return None if tree is None else Projection(tree, deterministic, chosen)


def overlaps(left: Path, right: Path) -> bool:
    """Whether one path is a prefix of the other (what one reaches, the other may too)."""
    shorter = min(len(left), len(right))
    return left[:shorter] == right[:shorter]


__all__ = ["EACH", "NOTHING", "WHOLE", "Each", "Path", "Projection", "Tree", "overlaps", "projection_of", "trimmed"]
