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

from policies.engines.cel_text import Token, bound, bracket_pairs, call_arguments, lex


def _bind_arguments(tokens: list[Token], pairs: dict[int, int], j: int) -> list[tuple[int, int]] | None:
    """The three arguments' token spans when a `cel.bind(v, init, body)` macro starts at token `j`."""
    if not (tokens[j].kind == "ident" and tokens[j].text == "cel" and (j == 0 or tokens[j - 1].text != ".")
            and j + 3 < len(tokens) and tokens[j + 1].text == "." and tokens[j + 2].kind == "ident"
            and tokens[j + 2].text == "bind" and tokens[j + 3].text == "(" and j + 3 in pairs):
        return None  # `x.cel.bind(...)` is a member call, not the macro
    arguments = call_arguments(tokens, pairs, j + 3)
    if len(arguments) != 3 or any(first > last for first, last in arguments):
        return None
    variable = arguments[0]
    if variable[0] != variable[1] or tokens[variable[0]].kind != "ident":
        return None  # not the macro's shape: the checker has refused it already
    return arguments


def without_lazy_binds(expression: str) -> str:
    """`expression` with every `cel.bind(v, init, body)` written as `[init].map(v, body)[0]`."""
    if "bind" not in expression:
        return expression
    tokens = lex(expression)
    pairs = bracket_pairs(tokens)
    out: list[str] = []
    copied = j = 0
    while j < len(tokens):
        arguments = _bind_arguments(tokens, pairs, j)
        if arguments is None:
            j += 1
            continue
        (variable, _), (init_first, init_last), (body_first, body_last) = arguments
        init = without_lazy_binds(expression[tokens[init_first].start:tokens[init_last].end])
        body = without_lazy_binds(expression[tokens[body_first].start:tokens[body_last].end])
        out.append(expression[copied:tokens[j].start])
        out.append(bound(tokens[variable].text, init, body))
        closer = pairs[j + 3]
        copied = tokens[closer].end
        j = closer + 1
    out.append(expression[copied:])
    return "".join(out)


__all__ = ["without_lazy_binds"]
