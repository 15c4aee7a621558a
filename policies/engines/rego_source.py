"""What the loader needs to know about a Rego module without running it: its package and which of
the rules the runtime gathers (`deny`, `warn`, `decision`) it defines, and whether it is a test."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

GATHERED_RULES = ("deny", "warn", "decision")

_PACKAGE = re.compile(r"^\s*package\s+([A-Za-z_][\w.]*(?:\[\"[^\"]+\"\][\w.]*)*)\s*(?:#.*)?$", re.MULTILINE)
# Indented too, and ref heads (`deny.x := ...`): a rule missed here would never be enforced, while a false
# match (a local named `deny` in a body) only gathers a rule that stays undefined.
_RULE_HEAD = re.compile(r"^[ \t]*(deny|warn|decision)\b\s*(?:contains\b|\[|\.|:=|=|if\b|\{)", re.MULTILINE)
_TEST_RULE = re.compile(r"^(test_[A-Za-z0-9_]+)\b", re.MULTILINE)


class RegoSourceError(ValueError):
    pass


@dataclass(frozen=True)
class RegoModuleInfo:
    package: str  # dotted path without the leading `data.`
    rules: frozenset[str]  # which of GATHERED_RULES the module defines
    tests: tuple[str, ...]  # `test_*` rule names, in file order


def inspect_module(source: str) -> RegoModuleInfo:
    match = _PACKAGE.search(source)
    if match is None:
        raise RegoSourceError("no `package` declaration")
    rules = frozenset(m.group(1) for m in _RULE_HEAD.finditer(source))
    tests = tuple(dict.fromkeys(m.group(1) for m in _TEST_RULE.finditer(source)))
    return RegoModuleInfo(match.group(1), rules, tests)


_INPUT_PARAMS = re.compile(r"\binput\.params\b")


def bind_params(source: str, policy: str) -> str:
    """Point a GPUPolicy module's `input.params` at its own params in `data.kgwe.params[policy]`.

    Every policy sees its own params while all of them run in one query, without `with input.params`
    (which would make the engine recompute every input-dependent library rule once per policy).
    """
    return _INPUT_PARAMS.sub(f"data.kgwe.params[{json.dumps(policy)}]", source)
