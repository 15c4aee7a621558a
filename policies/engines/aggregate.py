"""The one Rego module that gathers every policy's `deny`, `warn` and `decision` into two documents,
so a request costs one engine query however many policies there are.

    data.kgwe.aggregate.check     {"deny": {policy: [msg]}, "warn": {policy: [msg]}}
    data.kgwe.aggregate.decision  {policy: partial decision}

GPUPolicy modules run only when the policy matched the request (`input.kgwe.active[name]`, decided by
match rules and CEL match conditions before any engine runs); their `input.params` is bound to
`data.kgwe.params[name]` when they are loaded (`rego_source.bind_params`). Built-in and admin
library policies run for every request and decide for themselves, except those the request names in
`input.kgwe.native[name]`: the runtime answered them without the engine (the built-ins in Python,
policies/engines/native_builtins.py) and merges that answer with the engine's.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

AGGREGATE_PACKAGE = "kgwe.aggregate"
# The package of the aggregate served on regorus' compiled VM (policies/engines/rego_rvm.py).
RVM_PACKAGE = "kgwe.aggregate_rvm"
AGGREGATE_MODULE = "kgwe-aggregate.rego"
CHECK_QUERY = f"data.{AGGREGATE_PACKAGE}.check"
DECISION_QUERY = f"data.{AGGREGATE_PACKAGE}.decision"
# The whole package: `check` and `decision` in one query, for a request that needs both (`/validate`).
EVERYTHING_QUERY = f"data.{AGGREGATE_PACKAGE}"
# The policies' rule kinds each query reads.
QUERY_KINDS: dict[str, tuple[str, ...]] = {
    CHECK_QUERY: ("deny", "warn"), DECISION_QUERY: ("decision",), EVERYTHING_QUERY: ("deny", "warn", "decision"),
}


def query_value(query: str, check: Callable[[], dict[str, Any]], decision: Callable[[], dict[str, Any]]) -> Any:
    """What `query` (one of QUERY_KINDS) answers, given its `check` and `decision` documents, each made
    only where the query needs it: the whole package holds its partial `deny`/`warn` documents too."""
    if query == CHECK_QUERY:
        return check()
    if query == DECISION_QUERY:
        return decision()
    checked = check()
    return {**checked, "check": checked, "decision": decision()}


@dataclass(frozen=True)
class GatheredPolicy:
    name: str
    package: str
    rules: frozenset[str]
    gated: bool  # a GPUPolicy: runs only when active, with its params


def _rule(kind: str, policy: GatheredPolicy) -> str:
    key = json.dumps(policy.name)
    conditions = []
    value = f"data.{policy.package}.{kind}"
    if policy.gated:
        conditions.append(f"input.kgwe.active[{key}]")
    else:
        conditions.append(f"not input.kgwe.native[{key}]")
    conditions.append(f"v := {value}")
    return f"{kind}[{key}] := v if {{\n\t" + "\n\t".join(conditions) + "\n}\n"


# The first line of every aggregate module: the gathered policies as JSON, so an engine that writes the
# aggregate its own way (regorus' compiled VM, policies/engines/rego_rvm.py) reads them back exactly.
GATHERED_HEADER = "# kgwe-gathered: "


def aggregate_module(policies: Iterable[GatheredPolicy]) -> str:
    chosen = list(policies)
    header = json.dumps([[p.name, p.package, sorted(p.rules), p.gated] for p in chosen], separators=(",", ":"))
    parts = [f"{GATHERED_HEADER}{header}\npackage {AGGREGATE_PACKAGE}\n\nimport rego.v1\n"]
    for policy in chosen:
        for kind in ("deny", "warn", "decision"):
            if kind in policy.rules:
                parts.append(_rule(kind, policy))
    check_kinds = [k for k in ("deny", "warn") if any(k in p.rules for p in chosen)]
    parts.append("check := {" + ", ".join(f'"{k}": {k}' for k in check_kinds) + "}\n")
    return "\n".join(parts)


def gathered_from_module(source: str) -> list[GatheredPolicy] | None:
    """The policies an `aggregate_module` text gathers, in order; None for a text it did not write."""
    first, _, _ = source.partition("\n")
    if not first.startswith(GATHERED_HEADER):
        return None
    try:
        rows = json.loads(first[len(GATHERED_HEADER):])
        return [GatheredPolicy(str(name), str(package), frozenset(map(str, rules)), bool(gated))
                for name, package, rules, gated in rows]
    except (ValueError, TypeError):
        return None


def has_decisions(policies: Iterable[GatheredPolicy]) -> bool:
    return any("decision" in p.rules for p in policies)
