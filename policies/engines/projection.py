"""A document cut to the paths some readers can read (a path keeps everything below it).

The readers are policies: Rego modules (policies/engines/rego_reads.py), CEL expressions
(policies/engines/cel_reads.py), GPUPolicy match rules. A projection only removes keys, never changes a
value, and keeps an object on the way to a kept path even when nothing of it is kept, so that what a
reader can reach is exactly what the whole document holds there.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

Path = tuple[str, ...]
WHOLE: Path = ()  # the path of a read of the whole document
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


__all__ = ["WHOLE", "Path", "Projection", "Tree", "overlaps", "projection_of"]
