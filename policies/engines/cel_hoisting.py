"""Subexpressions that many policies of one template share, computed once in a joined evaluation.

Policies made from one template differ in their params: `object.spec.containers.map(c, int(...)).sum()
<= params.max` in ten policies sums the same containers ten times. When CEL joins a request's
expressions into one evaluation (policies/engines/cel_batches.py), an operand that reads no `params`
and recurs across them is bound once, first, and each expression reads the bound value.

An operand is a maximal subexpression on either side of a top-level `||`, `&&` or relation (`==`, `!=`,
`<`, `<=`, `>`, `>=`, `in`), split at the lowest of these present, as CEL's grammar groups them; a text
with a top-level `? :` is not split. Only operands that call something (a `(` among their tokens) are
worth a binding. At the top level of an expression no comprehension binds a variable, so an operand
free of `params` means the same in every expression of the request.

Computing a bound operand first is eager where the expression may have stopped before it (`false &&
x`). When that evaluation fails, the joined evaluation fails, and the runtime runs each expression on
its own, as it does for any failure of a joined evaluation: the answers never change, only their cost.
"""

from __future__ import annotations

from collections.abc import Sequence

from policies.engines.cel_text import Token, bracket_pairs, fresh_name, is_field, lex

Span = tuple[int, int]  # token indexes, first and last inclusive

_RELATIONS = {"<", ">", "==", "!=", "<=", ">=", "in"}


def _operators(tokens: list[Token], pairs: dict[int, int], span: Span) -> tuple[list[tuple[int, int, str]], bool]:
    """The top-level binary operators of `span` as (first token, last token, operator), and whether a
    top-level `?` (a conditional) is among its tokens."""
    found: list[tuple[int, int, str]] = []
    conditional = False
    k, last = span
    while k <= last:
        token = tokens[k]
        if k in pairs and token.text in "([{":
            k = pairs[k] + 1
            continue
        following = tokens[k + 1] if k + 1 <= last else None
        joined = following is not None and following.start == token.end and following.kind == "punct"
        if token.kind == "punct":
            pair = token.text + following.text if joined and following is not None else ""
            if pair in ("||", "&&", "==", "!=", "<=", ">="):
                found.append((k, k + 1, pair))
                k += 2
                continue
            if token.text in "<>":
                found.append((k, k, token.text))
            elif token.text == "?" and not (k > 0 and tokens[k - 1].text in ".["):
                conditional = True
        elif token.kind == "ident" and token.text == "in":
            found.append((k, k, "in"))
        k += 1
    return found, conditional


def _reads_params(tokens: list[Token], span: Span) -> bool:
    return any(tokens[k].kind == "ident" and tokens[k].text == "params" and not is_field(tokens, k)
               for k in range(span[0], span[1] + 1))


def _calls(tokens: list[Token], span: Span) -> bool:
    return any(tokens[k].text == "(" for k in range(span[0], span[1] + 1))


def params_free_operands(expression: str) -> list[tuple[int, int]]:
    """Character ranges (start, end) of the maximal operands of `expression` that read no `params` and call
    something (see the module's docstring)."""
    tokens = lex(expression)
    if not tokens:
        return []
    pairs = bracket_pairs(tokens)
    found: list[Span] = []

    def visit(span: Span) -> None:
        if not _reads_params(tokens, span):
            if _calls(tokens, span):
                found.append(span)
            return
        operators, conditional = _operators(tokens, pairs, span)
        if conditional or not operators:
            return
        for level in (("||",), ("&&",), tuple(_RELATIONS)):
            cuts = [op for op in operators if op[2] in level]
            if cuts:
                break
        first = span[0]
        for start, end, _ in cuts:
            if start - 1 >= first:
                visit((first, start - 1))
            first = end + 1
        if first <= span[1]:
            visit((first, span[1]))

    visit((0, len(tokens) - 1))
    return [(tokens[a].start, tokens[b].end) for a, b in found]


def _key(text: str) -> str:
    """The operand's text with its spacing and comments normalised away."""
    return " ".join(token.text for token in lex(text))


def hoist(expressions: Sequence[str | None]) -> tuple[list[tuple[str, str]], list[str | None]]:
    """For the expressions of one joined evaluation (None: not a candidate): the bindings to make first,
    as (variable, operand text), and each expression with its hoisted operands replaced by their variable
    (None where nothing changed). Only operands found in two expressions or more are hoisted."""
    found = [params_free_operands(e) if e is not None else [] for e in expressions]
    counts: dict[str, int] = {}
    for expression, ranges in zip(expressions, found, strict=True):
        for key in {_key(expression[a:b]) for a, b in ranges} if expression is not None else ():
            counts[key] = counts.get(key, 0) + 1
    shared = {key for key, count in counts.items() if count >= 2}
    if not shared:
        return [], [None] * len(expressions)
    base = fresh_name("\n".join(e for e in expressions if e is not None), "kgwe__hoisted")
    names: dict[str, str] = {}
    bindings: list[tuple[str, str]] = []
    rewritten: list[str | None] = []
    for expression, ranges in zip(expressions, found, strict=True):
        if expression is None:
            rewritten.append(None)
            continue
        parts, position, changed = [], 0, False
        for a, b in ranges:
            key = _key(expression[a:b])
            if key not in shared:
                continue
            if key not in names:
                names[key] = f"{base}{len(names)}"
                bindings.append((names[key], expression[a:b]))
            parts.append(expression[position:a])
            parts.append(names[key])
            position, changed = b, True
        parts.append(expression[position:])
        rewritten.append("".join(parts) if changed else None)
    return bindings, rewritten


__all__ = ["hoist", "params_free_operands"]
