"""Which parts of the admission request a CEL expression can read, from its tokens.

The answer memo (policies/answer_memo.py) keys a GPUPolicy set's answers by what its policies read: a
CEL expression that reads `object.metadata.name` must see every replica, one that reads only
`object.spec.containers` need not.

Each occurrence of a variable (`object`, `oldObject`, `request`, `namespaceObject`) as a word of its own
or after CEL's root-scope dot (`.object`), not a field after `.` or `.?`, is a read of the path its
chain of constant steps names: `.field`, `.?field`, `['key']` or `["key"]`. The chain ends at anything
else (a method or macro call, a computed index, an operator, a comma), and everything below where it
ended counts as read: `object.spec.containers.all(c, c.image != '')` reads `object.spec.containers`
whole, `cel.bind(o, object, o.metadata.name)` reads all of `object`. The word shadowed by a
comprehension variable of the same name only adds reads.
Strings and comments are never words (policies/engines/cel_text.py).
"""

from __future__ import annotations

from policies.engines.cel_text import Token, is_field, lex
from policies.engines.projection import Path

# Where each CEL variable lives in the runtime's document (`request` with its objects, `namespaceObject`).
VARIABLE_PATHS: dict[str, Path] = {
    "object": ("request", "object"),
    "oldObject": ("request", "oldObject"),
    "request": ("request",),
    "namespaceObject": ("namespaceObject",),
}


def _plain_string(token: Token) -> str | None:
    """The value of a one-quoted string literal without escapes or prefixes, else None."""
    text = token.text
    if token.kind != "literal" or len(text) < 2 or text[0] not in "'\"" or text[-1] != text[0]:
        return None
    inner = text[1:-1]
    if "\\" in inner or text[0] in inner or text.startswith(("'''", '"""')):
        return None
    return inner


def _chain(tokens: list[Token], index: int) -> Path:
    """The constant steps after the variable at `index`."""
    steps: list[str] = []
    k = index + 1
    while k < len(tokens):
        token = tokens[k]
        if token.text == "." and k + 1 < len(tokens):
            field = k + 1
            if tokens[field].text == "?" and field + 1 < len(tokens):
                field += 1
            name = tokens[field]
            if name.kind != "ident" or (field + 1 < len(tokens) and tokens[field + 1].text == "("):
                break  # a method or macro on what the chain reached: it reads all of it
            steps.append(name.text)
            k = field + 1
            continue
        if token.text == "[" and k + 2 < len(tokens) and tokens[k + 2].text == "]":
            key = _plain_string(tokens[k + 1])
            if key is None:
                break
            steps.append(key)
            k += 3
            continue
        break
    return tuple(steps)


def cel_reads(expression: str) -> frozenset[Path]:
    """The document paths `expression` can read (see the module's docstring)."""
    tokens = lex(expression)
    found: set[Path] = set()
    for index, token in enumerate(tokens):
        root = VARIABLE_PATHS.get(token.text) if token.kind == "ident" else None
        if root is None or is_field(tokens, index):
            continue
        found.add(root + _chain(tokens, index))
    return frozenset(found)


__all__ = ["VARIABLE_PATHS", "cel_reads"]
