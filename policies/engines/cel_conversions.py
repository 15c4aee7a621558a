"""`int()`, `uint()`, `double()` and `timestamp()` of strings, parsed as Kubernetes parses them.

Kubernetes evaluates CEL with cel-go, whose conversions parse strings with Go's `strconv` and
`time.Parse`: `int(' 9')` is an error there. cel-cpp (cel-expr-python 0.1.3) is laxer, and these strings
often come from the pod (`int(object.metadata.annotations['gpus'])`), so its creator chooses them:

- `int`, `uint`, `double`, `timestamp` accept ASCII white space around the text (`int(' 9') == 9`);
- `uint` accepts a sign (`uint('+1') == 1u`; Go's ParseUint does not);
- `double` accepts a hexadecimal number without a `p` exponent (`double('0x10') == 16.0`), a signed NaN,
  and turns an out-of-range number into infinity (`double('1e400')`; Go fails with ErrRange).

Each such call runs as a check of the text, then the conversion: for a string the engine would accept
but Go would not, the conversion of `''` (an error, as cel-go's), for anything else the call itself:

    ([arg].map(c, type(c) == string && dyn(c).trim() != dyn(c) ? int('') : int(c))[0])

`c` is a name the expression does not contain. Values that are not strings convert as before.
"""

from __future__ import annotations

from policies.engines.cel_text import bound, bracket_pairs, call_arguments, fresh_name, lex

_FUNCTIONS = frozenset({"int", "uint", "double", "timestamp"})


def _guarded(function: str, argument: str, name: str) -> str:
    """The call `function(argument)`, with the check of a string argument (see the module's docstring).

    String functions, not `matches()`: a regular expression per call made the example policies' `int()`
    four times slower. Go's parsers accept no white space at either end (and cel-cpp none but ASCII), so
    `trim()` changing the text is enough to refuse it; the other checks are the laxities listed above."""
    text, lower = f"dyn({name})", f"dyn({name}).lowerAscii()"
    padded = f"{text}.trim() != {text}"
    refused = {
        "int": padded,
        "uint": f"({padded} || {text}.startsWith('+'))",
        # Go fails on a number out of range; cel-cpp gives infinity, which only an `inf` text may give.
        "double": (f"({padded} || {lower}.contains('x') && !{lower}.contains('p')"
                   f" || {lower}.endsWith('nan') && ({text}.startsWith('+') || {text}.startsWith('-'))"
                   f" || math.isInf(double({name})) && !{lower}.contains('inf'))"),
        "timestamp": padded,
    }[function]
    return bound(name, argument, f"type({name}) == string && {refused} ? {function}('') : {function}({name})")


def strict_conversions(expression: str) -> str:
    """`expression` with each `int(x)`, `uint(x)`, `double(x)`, `timestamp(x)` guarded (see the module's
    docstring); other text as it was."""
    if not any(f"{function}(" in expression or f"{function} (" in expression for function in _FUNCTIONS):
        return expression
    return _rewrite(expression, fresh_name(expression, "kgwe__conv"))


def _rewrite(text: str, name: str) -> str:
    tokens = lex(text)
    pairs = bracket_pairs(tokens)
    chosen: tuple[int, int] | None = None  # (function token, closing parenthesis)
    for j, token in enumerate(tokens):
        if (token.kind != "ident" or token.text not in _FUNCTIONS or (j > 0 and tokens[j - 1].text == ".")
                or j + 1 >= len(tokens) or tokens[j + 1].text != "(" or j + 1 not in pairs):
            continue
        if chosen is None or pairs[j + 1] > chosen[1]:
            # The call that ends last is inside no other's arguments: rewrite it whole, what precedes it
            # on its own; nothing after it is a call.
            chosen = (j, pairs[j + 1])
    if chosen is None:
        return text
    j, closer = chosen
    spans = call_arguments(tokens, pairs, j + 1)
    if len(spans) != 1 or spans[0][0] > spans[0][1]:
        return text  # not a conversion's shape: the checker has refused it already
    argument = text[tokens[spans[0][0]].start:tokens[closer].start]
    if argument.strip() in ("''", '""') or argument.strip().startswith("kgwe__conv"):
        # A guard's own calls (text already rewritten, as a batch of programs is): nothing to check.
        return _rewrite(text[:tokens[j].start], name) + text[tokens[j].start:]
    argument = _rewrite(argument, name)
    return (_rewrite(text[:tokens[j].start], name) + _guarded(tokens[j].text, argument, name)
            + text[tokens[closer].end:])


__all__ = ["strict_conversions"]
