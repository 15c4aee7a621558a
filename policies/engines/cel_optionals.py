"""`optMap` and `optFlatMap` written so that cel-cpp evaluates them right.

cel-cpp (cel-expr-python 0.1.3) expands `o.optMap(v, body)` to `o.hasValue() ? optional.of(<bind v to
o.value() in body>) : optional.none()`, with the same lazily initialised binding as `cel.bind` (see
policies/engines/cel_binds.py), and so it has the same fault: after a comprehension that stopped early,
the body reads that comprehension's element as `v`:

    [1, 2, 3].exists(x, x == 1) && optional.of(5).optMap(v, v).value() == 5     // was false

Each `o.optMap(v, body)` is run as

    ([o].map(t, t.hasValue() ? optional.of([t.value()].map(v, body)[0]) : optional.none())[0])

and each `o.optFlatMap(v, body)` as the same without `optional.of`: the same value (the body is
evaluated only when `o` has a value, with `v` bound to it eagerly, as cel-go does), made of plain
comprehension steps. `o` is written once, so chains (`a.optMap(..).optMap(..)`) grow linearly. `t` is a
name the expression does not contain. Expressions are still type-checked as their authors wrote them.

Type-checking them is the other hazard: cel-cpp's parser copies the operand of each call while it
expands the macro, so a chain of n calls expands to 2^n copies, holding the GIL (18 chained calls took
4 s, every request thread stopped meanwhile; the parser's limits, 32 levels and 100,000 nodes, are
checked only after the expansion). `optional_maps_refusal` keeps such texts from cel-cpp: more than
MAX_OPTIONAL_MAPS calls in one expression are refused when the policy is loaded.
"""

from __future__ import annotations

from policies.engines.cel_text import CLOSERS, Token, bound, bracket_pairs, call_arguments, fresh_name, lex

_MACROS = frozenset({"optMap", "optFlatMap"})
# At most this many optMap/optFlatMap calls in one expression: a chain of 8 costs cel-cpp's parser
# 2^8 copies of its operand (tens of milliseconds), and no sensible policy chains more.
MAX_OPTIONAL_MAPS = 8


def _ends_operand(token: Token) -> bool:
    if token.kind == "ident":
        return token.text != "in"
    return token.kind == "literal" or token.text in CLOSERS


def _operand_start(tokens: list[Token], pairs: dict[int, int], last: int) -> int | None:
    """The first token of the member chain (`a.b[0].c(...)`, `(x).y`, `[1].z`) that ends at `last`."""
    k = last
    while True:
        token = tokens[k]
        if token.kind == "punct":
            opener = pairs.get(k)
            if opener is None:
                return None
            before = tokens[opener - 1] if opener > 0 else None
            if tokens[opener].text == "[" and before is not None and _ends_operand(before):
                k = opener - 1  # an index: the operand before it goes on the chain
                continue
            if tokens[opener].text in "({" and before is not None and before.kind == "ident" and before.text != "in":
                head = opener - 1  # a call `f(...)`, `.f(...)`, or a message `T{...}`
            else:
                return opener  # a parenthesised expression, or a list or map literal
        else:
            head = k
        if head >= 1 and tokens[head - 1].text == ".":
            k = head - 2
        elif head >= 2 and tokens[head - 1].text == "?" and tokens[head - 2].text == ".":
            k = head - 3  # `.?field`
        else:
            return head
        if k < 0:
            return None


def optional_maps_refusal(expression: str) -> str | None:
    """Why `expression` must not reach cel-cpp's parser (see the module's docstring), or None."""
    if "optMap" not in expression and "optFlatMap" not in expression:
        return None
    tokens = lex(expression)
    calls = sum(1 for j, token in enumerate(tokens)
                if token.kind == "ident" and token.text in _MACROS and j > 0 and tokens[j - 1].text == ".")
    if calls <= MAX_OPTIONAL_MAPS:
        return None
    return (f"{calls} optMap/optFlatMap calls in one expression, more than {MAX_OPTIONAL_MAPS}: cel-cpp expands "
            "chained calls exponentially; split the expression or bind intermediate values with cel.bind")


def without_lazy_optional_maps(expression: str) -> str:
    """`expression` with every `o.optMap(v, body)` and `o.optFlatMap(v, body)` written as plain
    comprehensions (see the module's docstring); other text as it was."""
    if "optMap" not in expression and "optFlatMap" not in expression:
        return expression
    return _rewrite(expression, fresh_name(expression, "kgwe__opt"))


def _rewrite(text: str, name: str) -> str:
    tokens = lex(text)
    pairs = bracket_pairs(tokens)
    chosen: tuple[int, int, int] | None = None  # (macro token, operand start, closing parenthesis)
    for j, token in enumerate(tokens):
        if (token.kind != "ident" or token.text not in _MACROS or j < 2 or tokens[j - 1].text != "."
                or j + 1 >= len(tokens) or tokens[j + 1].text != "(" or j + 1 not in pairs):
            continue
        closer = pairs[j + 1]
        if chosen is not None and closer < chosen[2]:
            continue
        start = _operand_start(tokens, pairs, j - 2)
        if start is None:
            continue
        # The call that ends last is inside no other's operand or arguments: rewrite it whole, the text
        # before it on its own.
        chosen = (j, start, closer)
    if chosen is None:
        return text
    j, start, closer = chosen
    arguments = call_arguments(tokens, pairs, j + 1)
    if (len(arguments) != 2 or arguments[0][0] != arguments[0][1] or tokens[arguments[0][0]].kind != "ident"
            or arguments[1][0] > arguments[1][1]):
        return text  # not the macro's shape: the checker has refused it already
    variable = tokens[arguments[0][0]].text
    operand = _rewrite(text[tokens[start].start:tokens[j - 1].start], name)
    body = _rewrite(text[tokens[arguments[1][0]].start:tokens[closer].start], name)
    # Newlines end any comment a part closes with.
    value = bound(variable, f"{name}.value()", body)
    if tokens[j].text == "optMap":
        value = f"optional.of({value})"
    rewritten = bound(name, operand, f"{name}.hasValue() ? {value} : optional.none()")
    return _rewrite(text[:tokens[start].start], name) + rewritten + text[tokens[closer].end:]


__all__ = ["MAX_OPTIONAL_MAPS", "optional_maps_refusal", "without_lazy_optional_maps"]
