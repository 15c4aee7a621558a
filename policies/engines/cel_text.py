"""CEL source text as tokens, for the rewrites that make cel-cpp answer right (cel_binds.py, cel_optionals.py,
cel_conversions.py). Only what they need: string literals, comments, numbers and identifiers are
recognised as such, and so are backtick-quoted field names (`` x.`a//b` ``), so text inside a string, a
quoted name or a comment is never mistaken for code; every other character is a one-character token.
The texts are ones the type checker has accepted.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

CLOSERS = {")": "(", "]": "[", "}": "{"}
_SPACE = re.compile(r"(?:\s+|//[^\n]*)+")
_STRING_START = re.compile(r"(?:[rR][bB]?|[bB][rR]?)?('''|\"\"\"|'|\")")
_NUMBER = re.compile(r"0[xX][0-9a-fA-F]+[uU]?|\d+(?:\.\d+)?(?:[eE][+-]?\d+)?[uU]?|\.\d+(?:[eE][+-]?\d+)?")
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# A field name in backticks (CEL allows `.`, `-`, `/` and spaces in one): `//` inside it opens no comment.
_QUOTED_NAME = re.compile(r"`[^`\n]*`")


@dataclass(frozen=True)
class Token:
    kind: str  # "ident", "literal" (a number, a string or a backtick-quoted field name: never a variable) or "punct"
    text: str
    start: int
    end: int


def _string_end(text: str, start: int, quote: str, raw: bool) -> int:
    """The index after a string literal whose opening quote ends at `start`."""
    i = start
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


def lex(text: str) -> list[Token]:
    tokens: list[Token] = []
    i = 0
    while i < len(text):
        space = _SPACE.match(text, i)
        if space:
            i = space.end()
            continue
        string = _STRING_START.match(text, i)
        if string:
            raw = "r" in text[i:string.start(1)].lower()
            end = _string_end(text, string.end(), string.group(1), raw)
            tokens.append(Token("literal", text[i:end], i, end))
            i = end
            continue
        for kind, pattern in (("literal", _NUMBER), ("ident", _IDENT), ("literal", _QUOTED_NAME)):
            found = pattern.match(text, i)
            if found:
                tokens.append(Token(kind, found.group(), i, found.end()))
                i = found.end()
                break
        else:
            tokens.append(Token("punct", text[i], i, i + 1))
            i += 1
    return tokens


def opens_root_name(tokens: list[Token], index: int) -> bool:
    """Whether the `.` at `index` opens a name in the root scope (`.object`, `.params`: CEL's leading dot,
    which no local variable shadows) rather than selecting a field of what precedes it. `in` is the one
    operator spelled as a word: `'gpu' in .object.metadata.labels` names the variable."""
    if tokens[index].text != ".":
        return False
    before = tokens[index - 1] if index > 0 else None
    return before is None or not (before.kind == "literal" or (before.kind == "ident" and before.text != "in")
                                  or before.text in (")", "]", "}"))


def is_field(tokens: list[Token], index: int) -> bool:
    """Whether the word at `index` names a field (`x.word`, `x.?word`), not a variable (`word`, `.word`)."""
    dot = index - 1
    if dot >= 1 and tokens[dot].text == "?" and tokens[dot - 1].text == ".":
        dot -= 1
    return dot >= 0 and tokens[dot].text == "." and not opens_root_name(tokens, dot)


def bound(variable: str, init: str, body: str) -> str:
    """`body` with `variable` bound to the value of `init`, evaluated once, first: a one-element `map`.
    Every rewrite that binds a name writes it so: cel-cpp's own lazy `cel.bind` read a stale value after
    a comprehension that stopped early (cel_binds.py). Newlines end any comment a part closes with."""
    return f"([{init}\n].map({variable}, {body}\n)[0])"


def bracket_pairs(tokens: list[Token]) -> dict[int, int]:
    """Matching brackets, both ways, by token index (unmatched ones are left out)."""
    pairs: dict[int, int] = {}
    stack: list[int] = []
    for index, token in enumerate(tokens):
        if token.kind != "punct":
            continue
        if token.text in "([{":
            stack.append(index)
        elif token.text in CLOSERS and stack and tokens[stack[-1]].text == CLOSERS[token.text]:
            opener = stack.pop()
            pairs[opener], pairs[index] = index, opener
    return pairs


def call_arguments(tokens: list[Token], pairs: dict[int, int], opener: int) -> list[tuple[int, int]]:
    """(first, last) token indexes of each top-level argument of the call whose `(` is at `opener`."""
    spans: list[tuple[int, int]] = []
    first = opener + 1
    k = first
    closer = pairs[opener]
    while k < closer:
        if k in pairs and tokens[k].text in "([{":
            k = pairs[k] + 1
            continue
        if tokens[k].text == ",":
            spans.append((first, k - 1))
            first = k + 1
        k += 1
    spans.append((first, closer - 1))
    return spans


def fresh_name(text: str, base: str) -> str:
    """`base`, lengthened until `text` does not contain it: a variable no expression's own can shadow."""
    name = base
    while name in text:
        name += "_"
    return name
