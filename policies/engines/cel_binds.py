"""`cel.bind` written so that cel-cpp evaluates it right.

cel-cpp, as cel-expr-python 0.1.3 bundles it, initialises a `cel.bind` variable lazily and tells whether
it is set yet from a comprehension slot that sibling comprehensions share. A comprehension that stops
early (`exists` true at its first element, `all` false) leaves that slot holding its element, and a
`cel.bind` evaluated after it then reads that element instead of its own value:

    object.spec.containers.exists(c, c.name == 'a') && cel.bind(n, object.metadata.namespace, n == 'x')

compares the container with 'x'. A policy would answer wrongly, and no runtime option reaches the
binding. `[init].map(v, body)[0]` means what `cel.bind(v, init, body)` means (the spec's eager binding;
a failing `init` fails both) and runs on plain comprehension steps, so every bind is rewritten to it
in the text that runs. Expressions are still type-checked as their authors wrote them.
"""

from __future__ import annotations

_IDENT_START = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_")
_IDENT = _IDENT_START | frozenset("0123456789")
_OPEN = {"(": ")", "[": "]", "{": "}"}


def _string_end(text: str, start: int) -> int:
    """The index after the string literal whose prefix or quote starts at `start`."""
    i = start
    raw = False
    while text[i] not in "'\"":
        raw = raw or text[i] in "rR"
        i += 1
    quote = text[i] * 3 if text.startswith(text[i] * 3, i) else text[i]
    i += len(quote)
    while i < len(text):
        if text.startswith(quote, i):
            return i + len(quote)
        if text[i] == "\\" and not raw:
            i += 2
            continue
        if text[i] == "\n" and len(quote) == 1:
            break  # unterminated: the checker has refused this text already
        i += 1
    return len(text)


def _skip(text: str, i: int) -> int:
    """`i`, or past the string literal or comment starting there."""
    if text.startswith("//", i):
        end = text.find("\n", i)
        return len(text) if end < 0 else end
    if text[i] in "'\"":
        return _string_end(text, i)
    if text[i] in "rRbB":
        j = i
        while j < len(text) and j - i < 2 and text[j] in "rRbB":
            j += 1
        if j < len(text) and text[j] in "'\"" and (i == 0 or text[i - 1] not in _IDENT):
            return _string_end(text, i)
    return i


def _blank(text: str, i: int) -> int:
    while i < len(text) and text[i] in " \t\r\n":
        i += 1
    return i


def _arguments(text: str, i: int) -> tuple[list[str], int] | None:
    """The top-level arguments of the call whose `(` is at `i`, and the index after its `)`."""
    closing: list[str] = [")"]
    parts: list[str] = []
    start = i = i + 1
    while i < len(text):
        skipped = _skip(text, i)
        if skipped != i:
            i = skipped
            continue
        char = text[i]
        if char in _OPEN:
            closing.append(_OPEN[char])
        elif char in ")]}":
            if char != closing.pop():
                return None
            if not closing:
                parts.append(text[start:i])
                return parts, i + 1
        elif char == "," and len(closing) == 1:
            parts.append(text[start:i])
            start = i + 1
        i += 1
    return None


def _bind_at(text: str, i: int) -> tuple[str, int] | None:
    """When a `cel.bind(...)` macro starts at `i`: its rewritten text and the index after it."""
    if not text.startswith("cel", i) or (i > 0 and text[i - 1] in _IDENT):
        return None
    before = i - 1
    while before >= 0 and text[before] in " \t\r\n":
        before -= 1
    if before >= 0 and text[before] == ".":
        return None  # `x.cel.bind(...)` is a member call, not the macro
    j = i + 3
    if j < len(text) and text[j] in _IDENT:
        return None
    j = _blank(text, j)
    if not text.startswith(".", j):
        return None
    j = _blank(text, j + 1)
    if not text.startswith("bind", j) or (j + 4 < len(text) and text[j + 4] in _IDENT):
        return None
    j = _blank(text, j + 4)
    if not text.startswith("(", j):
        return None
    found = _arguments(text, j)
    if found is None or len(found[0]) != 3:
        return None
    (variable, init, body), end = found
    # Newlines end any comment an argument closes with.
    rewritten = (f"([{without_lazy_binds(init)}\n].map({variable.strip()}, {without_lazy_binds(body)}\n)[0])")
    return rewritten, end


def without_lazy_binds(expression: str) -> str:
    """`expression` with every `cel.bind(v, init, body)` written as `[init].map(v, body)[0]`."""
    if "bind" not in expression:
        return expression
    out: list[str] = []
    i = copied = 0
    while i < len(expression):
        skipped = _skip(expression, i)
        if skipped != i:
            i = skipped
            continue
        if expression[i] in _IDENT_START and (i == 0 or expression[i - 1] not in _IDENT):
            bind = _bind_at(expression, i)
            if bind is not None:
                out.append(expression[copied:i])
                out.append(bind[0])
                i = copied = bind[1]
                continue
            while i < len(expression) and expression[i] in _IDENT:
                i += 1
            continue
        i += 1
    out.append(expression[copied:])
    return "".join(out)


__all__ = ["without_lazy_binds"]
