"""Label selectors written the way kubectl takes them: `key=value,key2 in (a,b),!key3`.

The text is turned into the structured form (`matchExpressions`) and compiled by
`policies.vocabulary.selectors.parse_selector`, so both spellings match labels by one rule.
"""

from __future__ import annotations

import re
from typing import Any

from policies.vocabulary.selectors import LabelSelector, parse_selector

_KEY = r"[A-Za-z0-9][-A-Za-z0-9_./]*"
_VALUE = r"[-A-Za-z0-9_.]*"
_SET = re.compile(rf"\s*({_KEY})\s+(in|notin)\s+\(([^)]*)\)\s*")
_EQUALITY = re.compile(rf"\s*({_KEY})\s*(==|=|!=)\s*({_VALUE})\s*")
_ABSENT = re.compile(rf"\s*!\s*({_KEY})\s*")
_PRESENT = re.compile(rf"\s*({_KEY})\s*")
_SELECTOR_HINT = re.compile(r"[=!(]|\s(in|notin)\s")


def looks_like_selector(text: str) -> bool:
    """True for `a=b` or `k in (x)` style text; false for a plain list of names like `node-1,node-2`."""
    return bool(_SELECTOR_HINT.search(text))


def _split(text: str) -> list[str]:
    """Split on the commas that separate requirements, not those inside `in (a,b)`."""
    parts: list[str] = []
    current: list[str] = []
    depth = 0
    for char in text:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
            if depth < 0:
                raise ValueError(f"label selector {text!r}: unbalanced parenthesis")
        if char == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    if depth:
        raise ValueError(f"label selector {text!r}: unbalanced parenthesis")
    parts.append("".join(current))
    return parts


def selector_expressions(text: str) -> list[dict[str, Any]]:
    """The `matchExpressions` that `text` means."""
    expressions: list[dict[str, Any]] = []
    for part in _split(text):
        if not part.strip():
            raise ValueError(f"label selector {text!r}: empty requirement")
        if match := _SET.fullmatch(part):
            values = [v.strip() for v in match.group(3).split(",") if v.strip()]
            operator = "In" if match.group(2) == "in" else "NotIn"
            expressions.append({"key": match.group(1), "operator": operator, "values": values})
        elif match := _EQUALITY.fullmatch(part):
            operator = "NotIn" if match.group(2) == "!=" else "In"
            expressions.append({"key": match.group(1), "operator": operator, "values": [match.group(3)]})
        elif match := _ABSENT.fullmatch(part):
            expressions.append({"key": match.group(1), "operator": "DoesNotExist"})
        elif match := _PRESENT.fullmatch(part):
            expressions.append({"key": match.group(1), "operator": "Exists"})
        else:
            raise ValueError(f"label selector {text!r}: cannot read {part.strip()!r}")
    return expressions


def parse_label_selector(text: str) -> LabelSelector:
    """Compile `text`; raise ValueError saying which part is wrong."""
    selector = parse_selector({"matchExpressions": selector_expressions(text)})
    assert selector is not None  # a mapping always compiles to a selector
    return selector


def equality_labels(text: str) -> dict[str, str]:
    """The `key=value` requirements of `text` (a nodeSelector can carry only those)."""
    return {
        e["key"]: e["values"][0]
        for e in selector_expressions(text)
        if e["operator"] == "In" and len(e.get("values") or []) == 1
    }
