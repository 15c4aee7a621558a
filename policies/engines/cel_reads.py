"""Which parts of the admission request a CEL expression can read, from its tokens.

The answer memo (policies/runtime/answer_memo.py) keys a GPUPolicy set's answers by what its policies read: a
CEL expression that reads `object.metadata.name` must see every replica, one that reads only
`object.spec.containers` need not.

Each occurrence of a variable (`object`, `oldObject`, `request`, `namespaceObject`) as a word of its own
or after CEL's root-scope dot (`.object`), not a field after `.` or `.?`, is a read of the path its
chain of constant steps names: `.field`, `.?field`, `['key']` or `["key"]`. The chain ends at anything
else (a method or macro call, a computed index, an operator, a comma), and everything below where it
ended counts as read: `object.spec.containers.all(c, c.image != '')` reads `object.spec.containers`
whole, `cel.bind(o, object, o.metadata.name)` reads all of `object`. The word shadowed by a
comprehension variable of the same name only adds reads.

A chain that ends in `all`, `exists`, `exists_one` or `map` (macros whose answer is built from their
body, never the members themselves) reads its members only as far as the comprehension variable's own
chains reach in the body: `object.spec.containers.all(c, c.image != '')` reads
`request.object.spec.containers[*].image` (`EACH`, policies/engines/projection.py), and a nested macro on
such a chain narrows again. A variable used any other way (`c == x`, `f(c)`, `[c]`) reads its member
whole; `filter` and every other method keep the whole chain, as before.
Strings and comments are never words (policies/engines/cel_text.py).
"""

from __future__ import annotations

from policies.engines.cel_text import Token, bracket_pairs, call_arguments, is_field, lex
from policies.engines.projection import EACH, Path, trimmed

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


# Macros whose answer is made of what their body computes: they read of each member what the body does.
_NARROWING_MACROS = frozenset({"all", "exists", "exists_one", "map"})


def _chain(tokens: list[Token], index: int) -> tuple[Path, int]:
    """The constant steps after the variable at `index`, and the index of the token the chain ended at."""
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
    return tuple(steps), k


def _macro_variables(tokens: list[Token], pairs: dict[int, int], end: int
                     ) -> tuple[list[str], list[tuple[int, int]]] | None:
    """For a chain that ended at `.all(v, ...)` (or another narrowing macro): its comprehension variables
    and the token spans of the rest of its arguments; None for anything else."""
    if (end + 2 >= len(tokens) or tokens[end].text != "." or tokens[end + 1].kind != "ident"
            or tokens[end + 1].text not in _NARROWING_MACROS or tokens[end + 2].text != "("
            or end + 2 not in pairs):
        return None
    arguments = call_arguments(tokens, pairs, end + 2)
    # `map(x, t)`, `map(x, p, t)`: one variable. `all(x, p)`, and the two-variable `all(i, v, p)` (an index
    # or key and a member, both taken for members: a word used whole only reads more).
    declared = 1 if tokens[end + 1].text == "map" or len(arguments) == 2 else 2
    if len(arguments) not in (2, 3) or any(first != last or tokens[first].kind != "ident"
                                           for first, last in arguments[:declared]):
        return None
    return [tokens[first].text for first, _ in arguments[:declared]], arguments[declared:]


def _reads_at(tokens: list[Token], pairs: dict[int, int], index: int, base: Path, found: set[Path]) -> None:
    """What the name at `index`, standing for `base`, reads."""
    steps, end = _chain(tokens, index)
    macro = _macro_variables(tokens, pairs, end)
    if macro is None:
        found.add(trimmed(base + steps))
        return
    names, body = macro
    uses = [k for first, last in body for k in range(first, last + 1)
            if tokens[k].kind == "ident" and tokens[k].text in names and not is_field(tokens, k)]
    # A member used whole (a nested comprehension declaring the same name is such a use) reads the
    # collection whole, and every other use reads below it: nothing more to follow. Following them anyway
    # would follow a shadowed name once per enclosing comprehension: 2^depth walks for `c.all(c, c.all(c, ...))`.
    if any(_whole_use(tokens, pairs, k) for k in uses):
        found.add(trimmed(base + steps))
        return
    member = (*base, *steps, EACH)
    read: set[Path] = set()
    for k in uses:
        _reads_at(tokens, pairs, k, member, read)
    # A body that reads nothing of its members still counts them: the collection whole, as before.
    found.update(read or {base + steps})


def _whole_use(tokens: list[Token], pairs: dict[int, int], index: int) -> bool:
    """Whether the name at `index` stands for all of its value: no constant step, no narrowing macro after it."""
    steps, end = _chain(tokens, index)
    return not steps and _macro_variables(tokens, pairs, end) is None


def cel_reads(expression: str) -> frozenset[Path]:
    """The document paths `expression` can read (see the module's docstring)."""
    tokens = lex(expression)
    pairs = bracket_pairs(tokens)
    found: set[Path] = set()
    for index, token in enumerate(tokens):
        root = VARIABLE_PATHS.get(token.text) if token.kind == "ident" else None
        if root is None or is_field(tokens, index):
            continue
        _reads_at(tokens, pairs, index, root, found)
    return frozenset(found)


__all__ = ["VARIABLE_PATHS", "cel_reads"]
