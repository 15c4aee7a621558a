"""Reading regorus' syntax tree of a Rego module (`Engine.get_ast_as_json`).

What KGWE reads a policy's text for (which input it can read, rego_reads.py; which rules depend on
which, rego_cycles.py; which imported names can be written out, rego_imports.py) all starts from the
same shapes: a reference chain (`RefDot` and `RefBrack` steps down to a root expression), a variable,
a rule's head. They are read here once, from the parser's own tree, never from the text.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import orjson

Path = tuple[str, ...]
REFS = ("RefDot", "RefBrack")


# A reload reads each module several times (its reads, the RVM's import rewrite, the recursion check,
# once per unit compiled with the library): one parse serves them all, and an unchanged module is not
# parsed again on the next reload. Callers only read the tree.
@functools.lru_cache(maxsize=64)
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


def references(node: Any) -> Iterator[tuple[str, Any, list[str | None]]]:
    """Every use of a variable below `node`: (its name, its node, the keys of the reference it roots; []
    for the variable alone). A reference's computed indexes, and a root that is not a variable, are
    searched in turn."""
    if isinstance(node, list):
        for item in node:
            yield from references(item)
        return
    if not isinstance(node, dict):
        return
    if is_ref(node):
        root, keys, indexes = unchain(node)
        name = var(root)
        if name is not None:
            yield name, root, keys
        else:
            yield from references(root)
        yield from references(indexes)
        return
    name = var(node)
    if name is not None:
        yield name, node, []
        return
    for value in node.values():
        yield from references(value)


@dataclass(frozen=True)
class Import:
    """An import of a document: `import data.kgwe.lib.pod` binds `pod` to ("data", ("kgwe", "lib", "pod"))."""

    name: str  # the name it binds (its `as`, else the path's last key, else the root)
    root: str  # "input" or "data"
    path: Path  # below the root
    text: bytes  # the reference as written in the source
    written: bool  # whether the name is written in the source (`as name`, or a path ending in `.name`)


def document_imports(ast: Mapping[str, Any], source: str) -> list[Import]:
    """The module's imports of `input` and `data` (not `rego.v1` or `future.keywords`); raises
    UnicodeDecodeError when a span does not fall on the source's characters."""
    raw = source.encode("utf-8")
    found = []
    for entry in ast.get("imports") or []:
        refr = entry.get("refr")
        root, keys, _ = unchain(refr)
        kind = var(root)
        where = span(refr)
        if kind not in ("input", "data") or where is None or any(key is None for key in keys):
            continue
        path = tuple(key for key in keys if key is not None)
        alias = entry.get("as")
        aliased = isinstance(alias, dict) and isinstance(alias.get("start"), int) and isinstance(alias.get("end"), int)
        # The name an import binds: its `as`, else the path's last key, else the root itself.
        default = path[-1] if path else kind
        name = raw[alias["start"]:alias["end"]].decode("utf-8") if aliased else default
        written = aliased or (isinstance(refr, dict) and "RefDot" in refr)
        found.append(Import(name, kind, path, raw[where[0]:where[1]], written))
    return found


def package_path(ast: Mapping[str, Any]) -> Path:
    """The module's package as a path below `data` (empty when unreadable)."""
    root, keys, _ = unchain((ast.get("package") or {}).get("refr"))
    first = var(root)
    return tuple(k for k in [first, *keys] if k is not None) if first else ()


__all__ = [
    "REFS", "Import", "Path", "document_imports", "dotted", "head_name", "head_ref", "is_ref", "leading",
    "package_path", "parse_module", "references", "span", "static_key", "unchain", "var",
]
