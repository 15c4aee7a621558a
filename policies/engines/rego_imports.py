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

from policies.engines.rego_ast import document_imports, head_name, parse_module, references, span

log = logging.getLogger("kgwe.policies")


def expanded_imports(name: str, source: str) -> str:
    """`source` with each safely replaceable imported `data` name written out in full (see the module's
    docstring); `source` itself when there is none, or when the parser cannot read it alone."""
    try:
        ast = parse_module(name, source)
        imported = document_imports(ast, source)
    except Exception as exc:  # the interpreter reports what does not parse; here it is only not rewritten
        log.debug("Rego module %s: imports kept as written (%s)", name, exc)
        return source
    paths = {i.name: i.text for i in imported if i.root == "data" and i.path and i.written and i.name.isidentifier()}
    if not paths:
        return source
    rules = ast.get("rules") or []
    uses: dict[str, list[tuple[int, int]]] = {}
    unsafe = {head for head in (head_name(rule) for rule in rules) if head in paths}
    for local, root, keys in references(rules):
        if local not in paths:
            continue
        where = span(root)
        if keys and keys[0] is not None and where is not None:
            uses.setdefault(local, []).append(where)
        else:
            unsafe.add(local)
    raw = source.encode("utf-8")
    replacements = sorted(((start, end, local) for local, spans in uses.items() if local not in unsafe
                           for start, end in spans), reverse=True)
    for start, end, local in replacements:
        if raw[start:end] != local.encode("utf-8"):
            return source  # spans that do not point at the name: change nothing
        raw = raw[:start] + paths[local] + raw[end:]
    return raw.decode("utf-8")


__all__ = ["expanded_imports"]
