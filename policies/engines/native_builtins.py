"""The built-in Rego policies (rego/admission, rego/placement, rego/lib/pod.rego) evaluated in Python.

`/validate` spent two thirds of its CPU in the one Rego query, and with only the built-in policies loaded
(the default) that query answers questions a few dictionary lookups answer. `PolicyRuntime` asks this
module for the built-ins' part of the aggregate documents. When no loaded Rego policy other than the
built-ins can speak for a request (`NativeBuiltins.answers`), that is the whole answer; otherwise the
engine answers the other policies, skipping the built-ins (`input.kgwe.native`), and `merge_answers`
joins the two. Everything after the query (merging decisions, turning messages into violations) is shared.

Contract: identical answers to regorus on the same modules, or no answer at all.

- Each built-in is bound to the exact text of the module it mirrors (SHA-256 below). A changed or
  replaced module (an admin package with a built-in's name replaces it) disables the native path for the
  whole set, and Rego runs as before. `tests/policies/test_native_builtins.py` fails when a shipped
  module no longer matches, and compares both paths on generated pods.
- Any input whose Rego meaning depends on a corner of the language (a non-object container, a number
  where a string belongs, a string `%q` would escape, a fractional memory size, a MIG profile that
  `to_number` may refuse) raises `Declined`, and the caller runs the Rego query instead. Declining is
  always safe; guessing is not.
- No other module may share or enclose a built-in's package (or `kgwe.aggregate`, `kgwe.cluster`,
  `kgwe.params`): such a module could add rules to the documents the built-ins read.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from policies.engines.aggregate import EVERYTHING_QUERY, QUERY_KINDS, query_value
from policies.engines.native_rules import CHECKS, DECISIONS, Cluster, Declined, Placement, Pod

# The module texts the Python of native_rules.py mirrors, by package.
KNOWN_MODULES: dict[str, str] = {
    "kgwe.admission.memory_limit": "1029c6adf70d9917f653e2593622ee706584390969dd24de0c58c4feb6f21e96",
    "kgwe.admission.privileged": "15609944f5bab1715abe11934985a608b5b4e23e20d4fb543345415e9597e87c",
    "kgwe.admission.visible_devices": "17505f5019d99b0d888bfd81fab762df4626e8beac757df19d51eea018721cdb",
    "kgwe.lib.pod": "e05bde901229a33ce2e5e9baeda267c130f338a20530cc10972710bd3efda49f",
    "kgwe.placement.inference_mig": "4a8fcc4f8c5e30bb587f2cd25eda1dfb34e78db4147d6eb04ec1fb52a7fc87c6",
    "kgwe.placement.namespace_mig": "7d62ace9b118dcc46bfe166cbf1d5a6ff597ef068486e330c4c4963831af955d",
    "kgwe.placement.nvlink": "f648d174c8dc1c60a8436fd0dd4652965cdbdfb7269258ccc98a468693d072c1",
}
LIBRARY = "kgwe.lib.pod"
# Packages no other module may share or enclose: the built-ins, and the documents they and the aggregate read.
PROTECTED_PACKAGES = (*KNOWN_MODULES, "kgwe.aggregate", "kgwe.cluster", "kgwe.params")


@dataclass(frozen=True)
class NativeUnit:
    """What the native path needs to know about one loaded unit."""

    name: str
    packages: tuple[str, ...]
    module_sources: tuple[str, ...]
    gated: bool  # a GPUPolicy (its Rego runs only when it matched the request)
    rule_kinds: frozenset[str]  # which of deny, warn, decision it defines

    @property
    def has_rego_rules(self) -> bool:
        return bool(self.rule_kinds)


def native_units(units: Iterable[Any]) -> list[NativeUnit]:
    """`NativeUnit`s of compiled units (`policies.policy_set.CompiledUnit`: name, source, gpu_policy)."""
    return [
        NativeUnit(
            name=u.name,
            packages=tuple(info.package for info in u.source.infos),
            module_sources=tuple(u.source.modules.values()),
            gated=u.gpu_policy is not None,
            rule_kinds=frozenset(u.source.rules),
        )
        for u in units
    ]


def module_digest(source: str) -> str:
    return hashlib.sha256(source.encode("utf-8")).hexdigest()


def _overlaps(package: str, protected: str) -> bool:
    if "[" in package or "\"" in package:
        return True  # quoted path segments: not worth reasoning about, assume the worst
    return package == protected or protected.startswith(package + ".") or package.startswith(protected + ".")


class NativeBuiltins:
    """The built-ins of one policy set, evaluated in Python. Immutable, thread-safe."""

    def __init__(self, policies: list[str], gated: frozenset[str], always: frozenset[str] = frozenset()) -> None:
        self._policies = policies  # built-in policy names in load order (the order decisions merge in)
        self._gated = gated  # GPUPolicies with Rego rules: an active one needs the engine for its part
        # The rule kinds admin Rego policies define: they run for every request, so a query gathering one
        # of these kinds needs the engine; one gathering none of them (an admin `deny` and the decision
        # query) is the built-ins' alone.
        self._always = always
        self._offers: tuple[Mapping[str, Any], Any] | None = None

    @classmethod
    def for_units(cls, units: Iterable[NativeUnit]) -> NativeBuiltins | None:
        """The native evaluator of a set, or None when the set holds anything it cannot mirror."""
        policies: list[str] = []
        gated: set[str] = set()
        always: set[str] = set()
        library_ok = False
        for unit in units:
            known = [KNOWN_MODULES.get(p) for p in unit.packages]
            if not unit.gated and len(unit.packages) == 1 and known[0] is not None:
                if len(unit.module_sources) != 1 or module_digest(unit.module_sources[0]) != known[0]:
                    return None  # a built-in package with other text (an admin replaced it)
                if unit.packages[0] == LIBRARY:
                    library_ok = True
                elif unit.has_rego_rules:
                    policies.append(unit.name)
                continue
            if any(_overlaps(p, protected) for p in unit.packages for protected in PROTECTED_PACKAGES):
                return None
            if unit.gated:
                if unit.has_rego_rules:
                    gated.add(unit.name)
            elif unit.has_rego_rules:
                always |= unit.rule_kinds  # an admin Rego policy: it runs for every request
        if policies and not library_ok:
            return None
        return cls(policies, frozenset(gated), frozenset(always))

    def answers(self, active: Iterable[str], query: str = EVERYTHING_QUERY) -> bool:
        """Whether no Rego policy other than the built-ins speaks in `query`'s document for a request with
        these active GPUPolicies (the caller activates only GPUPolicies with rules the query gathers)."""
        if not self._always.isdisjoint(QUERY_KINDS.get(query, QUERY_KINDS[EVERYTHING_QUERY])):
            return False
        return not any(name in self._gated for name in active)

    @property
    def policies(self) -> list[str]:
        """The built-in policies answered here: when other Rego must run too, the engine skips these
        (`input.kgwe.native`) and `merge_answers` joins the two documents."""
        return self._policies

    # -- the aggregate's documents ----------------------------------------------------------------

    def query(self, path: str, document: Mapping[str, Any], cluster: Mapping[str, Any]) -> Any:
        """The value of `path` (one of the aggregate's queries) for `document`; raises Declined."""
        if path not in QUERY_KINDS:
            raise Declined(path)
        return query_value(path, lambda: self._check(document), lambda: self._decision(document, cluster))

    def _check(self, document: Mapping[str, Any]) -> dict[str, dict[str, list[str]]]:
        checks = {name: CHECKS[name] for name in self._policies if name in CHECKS}
        found: dict[str, dict[str, list[str]]] = {"deny": {}, "warn": {}}
        if not checks:
            return found
        pod = Pod(document)
        for name, (kind, check) in checks.items():
            found[kind][name] = sorted(check(pod))
        return {kind: found[kind] for kind in ("deny", "warn") if any(CHECKS[n][0] == kind for n in checks)}

    def _decision(self, document: Mapping[str, Any], cluster: Mapping[str, Any]) -> dict[str, Any]:
        decided: dict[str, Any] = {}
        chosen = [name for name in self._policies if name in DECISIONS]
        if not chosen:
            return decided
        context = Placement(document, self._cluster_offers(cluster))
        for name in chosen:
            partial = DECISIONS[name](context)
            if partial is not None:
                decided[name] = partial
        return decided

    def _cluster_offers(self, cluster: Mapping[str, Any]) -> Cluster:
        """`cluster_types` and `mig_offers` of lib/pod.rego, computed once per cluster summary object."""
        cached = self._offers
        if cached is not None and cached[0] is cluster:
            found = cached[1]
        else:
            try:
                found = Cluster.of(cluster)
            except Declined as declined:
                found = declined
            self._offers = (cluster, found)
        if isinstance(found, Declined):
            raise found
        return found  # type: ignore[no-any-return]


# The aggregate's document names; below them, policy names.
_DOCUMENTS = frozenset({"deny", "warn", "check", "decision"})


def merge_answers(native: Any, engine: Any) -> Any:
    """One aggregate document from the built-ins' answer here and the engine's answer for every other
    policy (it skipped the built-ins). Keys come out sorted, as in the engine's objects. Both documents
    name disjoint policies; anything else raises Declined (ask the engine for the whole document)."""
    if not isinstance(native, dict) or not isinstance(engine, dict):
        raise Declined("an aggregate document that is not an object")
    merged: dict[str, Any] = {}
    for key in sorted(native.keys() | engine.keys()):
        if key not in engine:
            merged[key] = native[key]
        elif key not in native:
            merged[key] = engine[key]
        elif key in _DOCUMENTS:
            merged[key] = merge_answers(native[key], engine[key])
        else:
            raise Declined(f"policy {key} answered twice")
    return merged


# -- lib/pod.rego ---------------------------------------------------------------------------------


