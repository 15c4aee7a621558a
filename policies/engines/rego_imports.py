"""Imported `data` names written out in full, for regorus' compiled VM (policies/engines/rego_rvm.py).

The RVM of gordon-to-regorus 0.13 compiles `import data.kgwe.lib.pod` followed by `pod.gpu_containers`
as a read of the whole package `data.kgwe.lib.pod`: every rule in it is evaluated to read one (~50 us per
request for the shipped library, against ~15 us for `data.kgwe.lib.pod.gpu_containers`). An import
names a document and nothing else, so the text compiled for the RVM says `data.kgwe.lib.pod.gpu_containers`
where the policy says `pod.gpu_containers`; the interpreter, the self-check's reference, compiles the
text as written.

A name is written out only where it can mean nothing but the import: every occurrence of it in the
module's rules is the root of a reference whose first step is a constant (`pod.x`, `pod["x"]`). Any
other occurrence (a local variable, a function argument, `pod[k]`, a rule head `pod.x := ...`, the name
alone) leaves that name as written everywhere in the module.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from policies.engines.rego_ast import REFS, head_name, parse_module, span, var

log = logging.getLogger("kgwe.policies")





def _root_and_first(node: Mapping[str, Any]) -> tuple[Any, bool, list[Any]]:
    """(the chain's root, whether its first step is a constant, the chain's computed indexes)."""
    current: Any = node
    first_constant = False
    indexes: list[Any] = []
    while isinstance(current, dict) and len(current) == 1 and next(iter(current)) in REFS:
        kind, step = next(iter(current.items()))
        if kind == "RefDot":
            first_constant = True
        else:
            index = step.get("index")
            constant = (isinstance(index, dict) and len(index) == 1 and next(iter(index)) in ("String", "RawString"))
            first_constant = constant
            if not constant:
                indexes.append(index)
        current = step.get("refr")
    return current, first_constant, indexes


def _scan(node: Any, names: set[str], uses: dict[str, list[tuple[int, int]]], unsafe: set[str]) -> None:
    if isinstance(node, list):
        for item in node:
            _scan(item, names, uses, unsafe)
        return
    if not isinstance(node, dict):
        return
    if len(node) == 1 and next(iter(node)) in REFS:
        root, first_constant, indexes = _root_and_first(node)
        name = var(root)
        if name in names:
            where = span(root)
            if first_constant and where is not None:
                uses.setdefault(name, []).append(where)
            else:
                unsafe.add(name)
        else:
            _scan(root, names, uses, unsafe)
        _scan(indexes, names, uses, unsafe)
        return
    name = var(node)
    if name is not None:
        if name in names:
            unsafe.add(name)
        return
    for value in node.values():
        _scan(value, names, uses, unsafe)


def expanded_imports(name: str, source: str) -> str:
    """`source` with each safely replaceable imported `data` name written out in full (see the module's
    docstring); `source` itself when there is none, or when the parser cannot read it alone."""
    try:
        ast = parse_module(name, source)
    except Exception as exc:  # the interpreter reports what does not parse; here it is only not rewritten
        log.debug("Rego module %s: imports kept as written (%s)", name, exc)
        return source
    raw = source.encode("utf-8")
    paths: dict[str, bytes] = {}
    for entry in ast.get("imports") or []:
        refr = entry.get("refr")
        where = span(refr)
        root, _, indexes = _root_and_first(refr) if isinstance(refr, dict) else (None, False, [])
        if var(root) != "data" or indexes or where is None or refr is root:
            continue
        path = raw[where[0]:where[1]]
        alias = entry.get("as")
        local: Any
        if isinstance(alias, dict) and isinstance(alias.get("start"), int) and isinstance(alias.get("end"), int):
            local = raw[alias["start"]:alias["end"]].decode("utf-8", "replace")
        else:
            last = refr[next(iter(refr))]
            local = last.get("field", [None, None])[-1] if "RefDot" in refr else None
        if isinstance(local, str) and local.isidentifier():
            paths[local] = path
    if not paths:
        return source
    rules = ast.get("rules") or []
    uses: dict[str, list[tuple[int, int]]] = {}
    unsafe = {head for head in (head_name(rule) for rule in rules) if head in paths}
    _scan(rules, set(paths), uses, unsafe)
    replacements = sorted(((start, end, local) for local, spans in uses.items() if local not in unsafe
                           for start, end in spans), reverse=True)
    for start, end, local in replacements:
        if raw[start:end] != local.encode("utf-8"):
            return source  # spans that do not point at the name: change nothing
        raw = raw[:start] + paths[local] + raw[end:]
    return raw.decode("utf-8")


__all__ = ["expanded_imports"]
