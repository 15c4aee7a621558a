"""Reading regorus' syntax tree of a Rego module (`Engine.get_ast_as_json`).

What KGWE reads a policy's text for (which input it can read, rego_reads.py; which rules depend on
which, rego_cycles.py; which imported names can be written out, rego_imports.py) all starts from the
same shapes: a reference chain (`RefDot` and `RefBrack` steps down to a root expression), a variable,
a rule's head. They are read here once, from the parser's own tree, never from the text.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

Path = tuple[str, ...]
REFS = ("RefDot", "RefBrack")


def parse_module(name: str, source: str) -> dict[str, Any]:
    """The syntax tree of one module on its own (raises what regorus raises when it does not parse)."""
    import regorus

    engine = regorus.Engine()
    engine.add_policy(name, source)
    parsed: dict[str, Any] = orjson.loads(engine.get_ast_as_json())[0]["ast"]
    return parsed


def is_ref(node: Any) -> bool:
    return isinstance(node, dict) and len(node) == 1 and next(iter(node)) in REFS


def var(node: Any) -> str | None:
    """The name of a variable expression, else None."""
    if isinstance(node, dict) and len(node) == 1 and isinstance(node.get("Var"), dict):
        value = node["Var"].get("value")
        return value if isinstance(value, str) else None
    return None


def static_key(index: Any) -> str | None:
    """The key a bracket index names when it is a string literal, else None."""
    if isinstance(index, dict) and len(index) == 1:
        kind, body = next(iter(index.items()))
        if kind in ("String", "RawString") and isinstance(body, dict) and isinstance(body.get("value"), str):
            return str(body["value"])
    return None


def _field(step: Mapping[str, Any]) -> str | None:
    field = step.get("field")
    # The parser writes a field as [span, name].
    if isinstance(field, list) and field and isinstance(field[-1], str):
        return field[-1]
    return None


def unchain(node: Any) -> tuple[Any, list[str | None], list[Any]]:
    """A reference chain as (root expression, keys from the root outward, computed indexes); a key is None
    where the step is computed (or not a string literal). Any other expression is its own root."""
    keys: list[str | None] = []
    indexes: list[Any] = []
    current: Any = node
    while is_ref(current):
        kind, step = next(iter(current.items()))
        if kind == "RefDot":
            keys.append(_field(step))
        else:
            key = static_key(step.get("index"))
            keys.append(key)
            if key is None:
                indexes.append(step.get("index"))
        current = step.get("refr")
    keys.reverse()
    return current, keys, indexes


def leading(keys: list[str | None]) -> Path:
    """The constant keys before the first computed one."""
    path: list[str] = []
    for key in keys:
        if key is None:
            break
        path.append(key)
    return tuple(path)


def dotted(node: Any) -> str | None:
    """`time.now_ns` for the function expression of a call, when it is a plain dotted name."""
    root, keys, _ = unchain(node)
    name = var(root)
    if name is None or any(k is None for k in keys):
        return None
    return ".".join([name, *(k for k in keys if k is not None)])


def span(node: Any) -> tuple[int, int] | None:
    """(start, end) byte offsets into the source of an expression node."""
    body = next(iter(node.values())) if isinstance(node, dict) and len(node) == 1 else None
    found = body.get("span") if isinstance(body, dict) else None
    if isinstance(found, dict) and isinstance(found.get("start"), int) and isinstance(found.get("end"), int):
        return found["start"], found["end"]
    return None


def head_ref(rule: Any) -> Any:
    """The reference a rule's head defines (`pod` of `pod := ...`, `deny` of `deny contains ...`, `a.b` of
    `a.b := 1`), or None."""
    if not isinstance(rule, dict) or len(rule) != 1:
        return None
    kind, body = next(iter(rule.items()))
    if not isinstance(body, dict):
        return None
    if kind == "Default":
        return body.get("refr")
    head = body.get("head")
    inner = next(iter(head.values()), None) if isinstance(head, dict) and len(head) == 1 else None
    return inner.get("refr") if isinstance(inner, dict) else None


def head_name(rule: Any) -> str | None:
    """The name a rule defines: the root of its head reference."""
    return var(unchain(head_ref(rule))[0])


def package_path(ast: Mapping[str, Any]) -> Path:
    """The module's package as a path below `data` (empty when unreadable)."""
    root, keys, _ = unchain((ast.get("package") or {}).get("refr"))
    first = var(root)
    return tuple(k for k in [first, *keys] if k is not None) if first else ()


__all__ = [
    "REFS", "Path", "dotted", "head_name", "head_ref", "is_ref", "leading", "package_path", "parse_module", "span",
    "static_key", "unchain", "var",
]
