"""JSON paths a mutator owns: patterns over RFC 6901 pointers, how two of them overlap, and an index
that finds the owner of a written path.

A pattern is a JSON Pointer in its escaped form (`/metadata/annotations/kgwe.io~1tenant`) whose tokens
may also be `*` (any one token: a container index) or end in `*` (any token with that prefix:
`kgwe.io~1*`). Owning a pattern means owning everything under it. Two patterns overlap when some path
lies under both, which is when one is, token by token, a prefix of the other.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from webhook.mutation.patch import escape

WILDCARD = "*"


def tokens_of(pointer: str) -> tuple[str, ...]:
    """The escaped tokens of a JSON Pointer (`""` is the whole document: no tokens)."""
    if pointer == "":
        return ()
    if not pointer.startswith("/"):
        raise ValueError(f"not a JSON Pointer: {pointer!r}")
    return tuple(pointer[1:].split("/"))


def _token_matches(pattern: str, token: str) -> bool:
    if pattern == WILDCARD:
        return True
    if pattern.endswith(WILDCARD):
        return token.startswith(pattern[:-1])
    return pattern == token


def _tokens_meet(a: str, b: str) -> bool:
    """Whether some token matches both pattern tokens."""
    if a == WILDCARD or b == WILDCARD:
        return True
    a_prefix, b_prefix = a.endswith(WILDCARD), b.endswith(WILDCARD)
    if a_prefix and b_prefix:
        return a[:-1].startswith(b[:-1]) or b[:-1].startswith(a[:-1])
    if a_prefix:
        return b.startswith(a[:-1])
    if b_prefix:
        return a.startswith(b[:-1])
    return a == b


@dataclass(frozen=True)
class PathPattern:
    """One owned subtree of the pod."""

    pointer: str
    tokens: tuple[str, ...]

    @classmethod
    def parse(cls, pointer: str) -> PathPattern:
        tokens = tokens_of(pointer)
        if not tokens:
            raise ValueError("a mutator cannot own the whole pod")
        for token in tokens:
            if WILDCARD in token[:-1]:
                raise ValueError(f"{pointer!r}: `*` only as a whole token or at a token's end")
        return cls(pointer, tokens)

    def overlaps(self, other: PathPattern) -> bool:
        return all(_tokens_meet(a, b) for a, b in zip(self.tokens, other.tokens, strict=False))


def pointer(*keys: str) -> str:
    """A JSON Pointer from unescaped keys: `pointer("metadata", "labels", "kgwe.io/gang")`."""
    return "".join("/" + escape(key) for key in keys)


@dataclass
class _Node:
    owner: str | None = None
    literal: dict[str, _Node] = field(default_factory=dict)
    patterned: list[tuple[str, _Node]] = field(default_factory=list)  # `*` and `prefix*` tokens

    def children(self, token: str) -> Iterator[_Node]:
        child = self.literal.get(token)
        if child is not None:
            yield child
        for pattern, node in self.patterned:
            if _token_matches(pattern, token):
                yield node


class OwnerIndex:
    """Owned patterns as a token trie: finding the owner of a path costs a few dict lookups per token,
    whatever the number of mutators (the check runs on every /mutate)."""

    # Paths looked up are remembered (the same few recur on every request); the memo is bounded because
    # a path may hold a container index or a resource name a pod creator chose.
    MEMO_LIMIT = 4096

    def __init__(self) -> None:
        self._root = _Node()
        self._memo: dict[str, tuple[str | None, bool]] = {}

    def add(self, pattern: PathPattern, owner: str) -> None:
        self._memo.clear()
        node = self._root
        for token in pattern.tokens:
            if WILDCARD in token:
                found = next((child for text, child in node.patterned if text == token), None)
                if found is None:
                    found = _Node()
                    node.patterned.append((token, found))
                node = found
            else:
                node = node.literal.setdefault(token, _Node())
        node.owner = owner

    def lookup(self, path: str) -> tuple[str | None, bool]:
        """(owner of the JSON Pointer `path`, whether owned patterns lie under it), remembered."""
        found = self._memo.get(path)
        if found is None:
            tokens = tokens_of(path)
            owner = self.owner_of(tokens)
            found = (owner, owner is None and self.owns_below(tokens))
            if len(self._memo) >= self.MEMO_LIMIT:
                self._memo.clear()
            self._memo[path] = found
        return found

    def owner_of(self, tokens: tuple[str, ...]) -> str | None:
        """The owner of the path `tokens` (the pattern it lies under), None when nobody owns it."""
        return self._owner(self._root, tokens, 0)

    def _owner(self, node: _Node, tokens: tuple[str, ...], depth: int) -> str | None:
        if node.owner is not None:
            return node.owner
        if depth == len(tokens):
            return None
        for child in node.children(tokens[depth]):
            owner = self._owner(child, tokens, depth + 1)
            if owner is not None:
                return owner
        return None

    def owns_below(self, tokens: tuple[str, ...]) -> bool:
        """Whether some owned pattern lies strictly under the path `tokens` (so the path is structure
        that owners' writes may create, and its value must be judged piece by piece)."""
        return self._below(self._root, tokens, 0)

    def _below(self, node: _Node, tokens: tuple[str, ...], depth: int) -> bool:
        if depth == len(tokens):
            return bool(node.literal or node.patterned)
        return any(self._below(child, tokens, depth + 1) for child in node.children(tokens[depth]))


def written_paths(index: OwnerIndex, op: dict[str, Any]) -> Iterator[tuple[str, str | None]]:
    """Each (pointer, owner) an RFC 6902 operation writes. An add or replace at a parent of owned paths (a
    missing parent is added whole) is split into its value's children, so every piece is judged by its
    own owner; an empty parent is structure and writes nothing."""
    path = str(op.get("path", ""))
    owner, parent = index.lookup(path)
    value = op.get("value")
    if not parent or op.get("op") == "remove" or not isinstance(value, dict | list):
        yield path, owner
        return
    children = value.items() if isinstance(value, dict) else enumerate(value)
    for key, child in children:
        yield from written_paths(index, {"op": "add", "path": f"{path}/{escape(str(key))}", "value": child})
