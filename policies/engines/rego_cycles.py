"""Recursion among the rules of a Rego policy set, found in regorus' syntax tree.

Rego forbids recursion (OPA refuses such a set when it compiles it). regorus' interpreter finds it only
when a request reaches it, and fails that query; regorus 0.13's compiled VM (RVM) does not find it at
all: reached, mutual recursion overflows its stack and the process dies (a segmentation fault, nothing
Python can catch). A set whose recursion sits behind an input condition (`deny contains "x" if {
input.request.object.metadata.labels.loop == "yes"; a }` with `a if b` and `b if a`) passes every
load-time probe, so a pod creator could kill the webhook by labelling a pod. policies/engines/rego_rvm.py
therefore serves on the RVM only a set in which `rule_cycle` finds no cycle.

Sound by over-approximation: a rule depends on every rule its references may reach. A `data` reference
reaches the rules its leading constant keys overlap (`data.p` every rule of package `p`, `data.p.a.b` the
rule `p.a`); a name (`a`, `a.b`, `f(x)`) reaches the rules of the module's own package it may name, local
variables included (a local that shares a rule's name can only add an edge); an imported `data` path
reaches its rules from every rule of the importing module. A false cycle keeps a set on the interpreter,
which answers it correctly; a missed one cannot happen.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

from policies.engines.rego_ast import Path, leading, package_path, parse_module, references, unchain, var

log = logging.getLogger("kgwe.policies")



def _names(node: Any, found: set[Path]) -> None:
    """Every reference below `node`: ("data", ...) for a `data` reference, ("", name, ...) for a name."""
    for name, _, keys in references(node):
        if name == "data":
            found.add(("data", *leading(keys)))
        elif name != "input":
            found.add(("", name, *leading(keys)))


def _parts(rule: Mapping[str, Any]) -> tuple[Any, list[Any]]:
    """A rule's head reference (its name) and everything else it holds (bodies, values, arguments, keys)."""
    if "Default" in rule:
        default = rule["Default"]
        return default.get("refr"), [default.get("args"), default.get("value")]
    spec = rule.get("Spec") or {}
    head_ref: Any = None
    parts: list[Any] = [spec.get("bodies")]
    for form in (spec.get("head") or {}).values():
        if isinstance(form, dict):
            head_ref = form.get("refr")
            parts.extend(value for key, value in form.items() if key != "refr")
    return head_ref, parts


def _rules(modules: Mapping[str, str]) -> dict[Path, set[Path]] | None:
    """Each rule's path below `data` and the paths its references may reach; None when a module cannot
    be read on its own."""
    depends: dict[Path, set[Path]] = {}
    for name, source in modules.items():
        try:
            ast = parse_module(name, source)
        except Exception as exc:  # not readable alone: its dependencies are not known
            log.info("Rego module %s: its rules' dependencies are not known (%s)", name, exc)
            return None
        package = package_path(ast)
        imported: set[Path] = set()
        _names(ast.get("imports"), imported)
        imported = {path for path in imported if path[0] == "data"}
        for rule in ast.get("rules") or []:
            head, parts = _parts(rule)
            head_root, head_keys, head_indexes = unchain(head)
            rule_name = var(head_root)
            if rule_name is None:
                return None
            # The head's own name is not a reference to the rule; its computed keys are references.
            found: set[Path] = set()
            _names([parts, head_indexes], found)
            reached = depends.setdefault((*package, rule_name, *leading(head_keys)), set())
            reached.update(ref[1:] if ref[0] == "data" else (*package, *ref[1:]) for ref in found | imported)
    return depends


def _edges(depends: Mapping[Path, Iterable[Path]]) -> dict[Path, list[Path]]:
    """Rule -> the rules it may reach: those whose path overlaps a target's (one is a prefix of the other)."""
    below: dict[Path, list[Path]] = {}  # prefix -> the rules under it
    for rule in depends:
        for length in range(len(rule) + 1):
            below.setdefault(rule[:length], []).append(rule)
    edges: dict[Path, list[Path]] = {}
    for rule, targets in depends.items():
        reached: set[Path] = set()
        for target in targets:
            reached.update(below.get(target, ()))
            reached.update(target[:length] for length in range(1, len(target)) if target[:length] in depends)
        edges[rule] = sorted(reached)
    return edges


def rule_cycle(modules: Mapping[str, str]) -> list[str] | None:
    """A cycle among the rules of `modules` as dotted rule paths (`["p.a", "p.b", "p.a"]`); [] when there is
    none; None when a module cannot be read on its own (then: whether there is one is not known)."""
    depends = _rules(modules)
    if depends is None:
        return None
    edges = _edges(depends)
    state: dict[Path, int] = {}  # 1: on the current path, 2: done
    for start in edges:
        if start in state:
            continue
        path: list[Path] = [start]
        pending: list[list[Path]] = [list(edges[start])]
        state[start] = 1
        while pending:
            if not pending[-1]:
                state[path.pop()] = 2
                pending.pop()
                continue
            nxt = pending[-1].pop()
            if state.get(nxt) == 1:
                cycle = [*path[path.index(nxt):], nxt]
                return [".".join(rule) for rule in cycle]
            if nxt not in state:
                state[nxt] = 1
                path.append(nxt)
                pending.append(list(edges[nxt]))
    return []


__all__ = ["rule_cycle"]
