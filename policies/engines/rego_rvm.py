"""regorus' compiled VM (RVM) behind the embedded engine, for the policy sets where it answers exactly
as regorus' interpreter does.

`RegorusVmEngine.prepare` always prepares the interpreter (`_PreparedRegorus`), then tries to compile the
same set for the RVM. The RVM serves the set only when every gate below holds; otherwise the interpreter
serves it and one log line says why. Why gates at all: the RVM of gordon-to-regorus 0.13 differs from the
interpreter in two ways that matter here (tests/policies/test_rego_rvm.py pins both):

- A built-in function or operator that fails (`to_number("abc")`, `startswith(1, "a")`, `1 / 0`) yields
  *undefined* on the RVM; the interpreter fails the whole query, which the runtime answers per
  `policies.failureMode`.
- A rule body does not stop at an undefined built-in result: `msg := sprintf("%q", [c.name])` with no
  `c.name` adds the value `"<undefined>"` to a set instead of adding nothing.

Gates, in order:

1. The set compiles on the RVM (no `with`, `walk`, `print`, ... yet), uses no package of its own
   (`kgwe.aggregate_rvm`), and has no `every` (the RVM binds its variables wrongly: `every k in ks
   { t[k].n }` iterates `t` instead of indexing it).
2. Static: outside the shipped library modules (byte-identical to `rego/`), rules may call only built-ins
   that fail on argument *types* alone (`TYPE_ONLY_BUILTINS`) and use only instructions that cannot fail
   (`SAFE_INSTRUCTIONS`: no arithmetic, `+ - * / %` fail on zero divisors and non-numbers).
   `to_number`, `units.parse_bytes`, regular expressions and the like fail on well-typed strings, so a
   set using them stays on the interpreter; so does a `sprintf` whose literal format and literal argument
   array do not match one `%s`/`%v`/`%q` per argument (`sprintf_risk`).
3. Self-check at load: the interpreter and the RVM give byte-identical documents (orjson, sorted keys) for
   each aggregate query over a battery of probe requests (`probe_inputs`); an interpreter failure on a
   probe counts as a disagreement.
4. Per request: an input the guard cannot vouch for (`request_guard`: a pod shaped otherwise than the API
   server sends one, in the fields the shipped policies read, or a MIG profile name `to_number` would
   refuse) is answered by the interpreter, and so is any RVM answer that carries the `"<undefined>"`
   marker.

What no gate can see: an admin Rego policy (not the shipped library) whose type-only built-in fails on a
request that is valid yet unlike every probe (say `startswith(x, "a")` where `x` is a number only on some
pods). The interpreter would fail the query there, the RVM treats the call as undefined.
`policies.regoVm: off` (or `KGWE_REGO_VM=off`) serves every set on the interpreter.
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Iterable, Mapping
from typing import Any, Literal

import orjson

from policies.engines.aggregate import (
    AGGREGATE_MODULE,
    AGGREGATE_PACKAGE,
    CHECK_QUERY,
    DECISION_QUERY,
    EVERYTHING_QUERY,
    RVM_PACKAGE,
    GatheredPolicy,
    gathered_from_module,
)
from policies.engines.rego import (
    PreparedRego,
    RegoEvaluationError,
    RegoInput,
    ThreadBound,
    _json_default,
    _PreparedRegorus,
    clean_error,
)
from policies.engines.rego_cycles import rule_cycle
from policies.engines.rego_imports import expanded_imports
from policies.engines.rego_rvm_gates import (
    cluster_guard,
    module_packages,
    probe_inputs,
    request_guard,
    risky_constructs,
    same_document,
    shipped_packages_of,
)
from policies.kernel.kept import Kept
from policies.kernel.metrics import POLICY_REGO_VM_FALLBACKS

log = logging.getLogger("kgwe.policies")

RegoVmMode = Literal["auto", "off"]
REGO_VM_ENV = "KGWE_REGO_VM"
# The whole aggregate package as one rule: the RVM answers rules, not packages.
EVERYTHING_ENTRY = f"data.{RVM_PACKAGE}.everything"
RVM_AGGREGATE_MODULE = "kgwe-aggregate-rvm.rego"
# How the RVM prints an undefined value that leaked into a document.
UNDEFINED_MARK = '"<undefined>"'
_VMS_PER_THREAD = 4


def rego_vm_mode(value: str | None = None) -> RegoVmMode:
    """`value`, else `KGWE_REGO_VM`, else `auto`; anything but `off` reads as `auto`."""
    chosen = (value if value is not None else os.environ.get(REGO_VM_ENV, "auto")).strip().lower()
    return "off" if chosen == "off" else "auto"


def rego_evaluator(prepared: PreparedRego | None) -> str:
    """Which evaluator answers a prepared set's aggregate queries: `rvm` or `interpreter`."""
    return str(getattr(prepared, "evaluator", "interpreter"))


# -- the aggregate, written for the RVM --------------------------------------------------------


def rvm_aggregate_modules(policies: list[GatheredPolicy]) -> dict[str, str]:
    """The aggregate with the same documents as `aggregate_module`, without partial object rules with
    constant keys (the RVM has none): one complete helper rule per policy and kind, defaulting to {},
    merged by a comprehension. The helpers live in their own package, so that `data.kgwe.aggregate`
    holds exactly what the interpreter's does."""
    helpers = [f"package {RVM_PACKAGE}\n\nimport rego.v1\n"]
    kinds: dict[str, list[str]] = {"deny": [], "warn": [], "decision": []}
    for index, policy in enumerate(policies):
        key = orjson.dumps(policy.name).decode()
        for kind in ("deny", "warn", "decision"):
            if kind not in policy.rules:
                continue
            helper = f"{kind}_{index}"
            guard = f"input.kgwe.active[{key}]\n\t" if policy.gated else f"not input.kgwe.native[{key}]\n\t"
            helpers.append(f"default {helper} := {{}}\n\n{helper} := {{{key}: v}} if {{\n\t{guard}"
                           f"v := data.{policy.package}.{kind}\n}}\n")
            kinds[kind].append(f"data.{RVM_PACKAGE}.{helper}")
    aggregate = [f"package {AGGREGATE_PACKAGE}\n\nimport rego.v1\n"]
    present = [kind for kind, parts in kinds.items() if parts]
    for kind in present:
        aggregate.append(f"{kind} := {{k: v | some part in [{', '.join(kinds[kind])}]; some k, v in part}}\n")
    check_kinds = [k for k in ("deny", "warn") if k in present]
    aggregate.append("check := {" + ", ".join(f'"{k}": {k}' for k in check_kinds) + "}\n")
    whole = ", ".join(f'"{k}": data.{AGGREGATE_PACKAGE}.{k}' for k in ["check", *present])
    helpers.append(f"everything := {{{whole}}}\n")
    return {AGGREGATE_MODULE: "\n".join(aggregate), RVM_AGGREGATE_MODULE: "\n".join(helpers)}


# -- gates ---------------------------------------------------------------------------------------


# -- probes for the self-check ------------------------------------------------------------------


# -- the prepared set ---------------------------------------------------------------------------


class RvmRefused(Exception):
    """This set is not served on the RVM (the message says why); the interpreter serves it."""


# What preparing a set on the RVM concluded (its entries and compiled program, or why it is refused), by the set's
# modules and data: a reload after a GPUPolicy or configuration change prepares the unchanged Rego set again, and
# its compilation and self-check (most of a reload's time) give the same answer each time.
_VERIFIED: Kept[bytes, tuple[dict[str, str], bytes] | str] = Kept(16)


def _set_key(modules: Mapping[str, str], data_json: str) -> bytes:
    return hashlib.sha256(orjson.dumps([sorted(modules.items()), data_json])).digest()


class _PreparedRvm:
    """The RVM for the aggregate queries; everything else, and every input the guards refuse, goes to the
    interpreter prepared for the same set. Both see the same `set_cluster`."""

    engine_name = "regorus"
    evaluator = "rvm"

    def __init__(self, modules: Mapping[str, str], data: Mapping[str, Any], interpreter: _PreparedRegorus) -> None:
        self._interpreter = interpreter
        self._data = dict(data)
        self._data_json = orjson.dumps(self._data, default=_json_default).decode()
        self._cluster: Mapping[str, Any] | None = None
        self._cluster_ok: tuple[Mapping[str, Any] | None, bool] = (None, True)
        self._vms = ThreadBound("vms", self._build_vm, self._load_data, _VMS_PER_THREAD)
        self.fallbacks = 0  # requests the interpreter answered (guards); read by tests and the bench
        self._entries: dict[str, str] = {}
        self._binary = b""
        key = _set_key(modules, self._data_json)
        known = _VERIFIED.get(key)
        if isinstance(known, str):
            raise RvmRefused(known)
        if known is not None:
            self._entries, self._binary = dict(known[0]), known[1]
            self.set_cluster((self._data.get("kgwe") or {}).get("cluster") or {})  # as after the self-check
            return
        try:
            self._compile_and_check(modules)
        except RvmRefused as refused:
            _VERIFIED.put(key, str(refused))
            raise
        _VERIFIED.put(key, (dict(self._entries), self._binary))

    def _compile_and_check(self, modules: Mapping[str, str]) -> None:
        gathered = gathered_from_module(modules.get(AGGREGATE_MODULE, ""))
        if gathered is None:
            raise RvmRefused("no KGWE aggregate module")
        own = [name for name, source in modules.items() if name != AGGREGATE_MODULE
               for p in module_packages(source) if p == RVM_PACKAGE or p.startswith(RVM_PACKAGE + ".")]
        if own:
            raise RvmRefused(f"module {own[0]} uses package {RVM_PACKAGE}")
        self._entries = {CHECK_QUERY: CHECK_QUERY, EVERYTHING_QUERY: EVERYTHING_ENTRY}
        if any("decision" in g.rules for g in gathered):
            self._entries[DECISION_QUERY] = DECISION_QUERY
        # Imported names written out (rego_imports.py): the RVM reads a whole package through an import.
        rvm_modules = {**{name: expanded_imports(name, source) for name, source in modules.items()},
                       **rvm_aggregate_modules(gathered)}
        cycle = rule_cycle(rvm_modules)
        if cycle is None:
            raise RvmRefused("its rules' dependencies are not known (a module regorus cannot read alone)")
        if cycle:
            raise RvmRefused(f"recursive rules (the RVM crashes where a request reaches them): "
                             f"{' -> '.join(cycle[:5])}")
        try:
            import regorus

            program = regorus.Program.compile_from_modules(
                self._data_json, list(rvm_modules.items()), sorted(set(self._entries.values())))
        except BaseException as exc:
            # The compiler panics on some valid sets (an iteration in a set rule's head): pyo3 raises that
            # as PanicException, a BaseException. The interpreter serves such a set.
            if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                raise
            reason = (clean_error(str(exc)).splitlines() or [type(exc).__name__])[-1]
            raise RvmRefused(f"does not compile on the RVM: {reason}") from exc
        packages = {package for source in modules.values() for package in module_packages(source)}
        risky = risky_constructs(program.generate_listing(), shipped_packages_of(modules), packages)
        if risky:
            more = f" and {len(risky) - 3} more" if len(risky) > 3 else ""
            raise RvmRefused(f"may fail where the RVM answers undefined: {', '.join(risky[:3])}{more}")
        self._binary = bytes(program.serialize_binary())
        self._self_check([g.name for g in gathered if g.gated], [g.name for g in gathered if not g.gated])

    # The load-time self-check runs in the loading thread, on the same objects requests use.
    def _self_check(self, gated: Iterable[str], ungated: Iterable[str]) -> None:
        prepared_cluster = (self._data.get("kgwe") or {}).get("cluster") or {}
        try:
            for cluster, document in probe_inputs(gated, ungated):
                self.set_cluster(cluster if cluster is not None else prepared_cluster)
                rego_input = RegoInput(document)
                for query in self._entries:
                    try:
                        expected = self._interpreter.query(query, rego_input)
                    except RegoEvaluationError as exc:
                        raise RvmRefused(f"the interpreter fails a probe ({exc}); the RVM cannot fail") from exc
                    got = self._evaluate(query, rego_input)
                    if got is None or not same_document(got, expected):
                        raise RvmRefused(f"the RVM answers {query} differently on a probe request")
        except RvmRefused:
            self._forget_vm()  # the refused program's VM must not linger in this thread's cache
            raise
        finally:
            self.set_cluster(prepared_cluster)  # back to the data the set was prepared with

    def _vm(self) -> Any:
        return self._vms.get()

    def _build_vm(self) -> Any:
        import regorus

        # (program, whether it must be recompiled): the bytes come from this very build, so never.
        program, stale = regorus.Program.deserialize_binary(self._binary)
        if stale:
            raise RegoEvaluationError("the compiled Rego program must be recompiled")
        vm = regorus.Rvm()
        vm.load_program(program)
        return vm

    def _load_data(self, vm: Any) -> None:
        vm.set_data_json(self._full_data_json())

    def _full_data_json(self) -> str:
        if self._cluster is None:
            return self._data_json
        kgwe = dict(self._data.get("kgwe") or {})
        kgwe["cluster"] = self._cluster
        return orjson.dumps({**self._data, "kgwe": kgwe}, default=_json_default).decode()

    def set_cluster(self, cluster: Mapping[str, Any]) -> None:
        self._interpreter.set_cluster(cluster)
        if cluster is not self._cluster:
            self._cluster = cluster
            self._vms.data_changed()

    def _cluster_fits(self) -> bool:
        cluster = self._cluster
        known = self._cluster_ok
        if known[0] is not cluster or cluster is None:
            known = (cluster, cluster_guard(cluster) is None)
            self._cluster_ok = known
        return known[1]

    def _evaluate(self, query: str, rego_input: RegoInput) -> Any:
        """The RVM's answer, or None when the guards hand the request to the interpreter."""
        if request_guard(rego_input.document) is not None:
            POLICY_REGO_VM_FALLBACKS.labels("input").inc()
            return None
        if not self._cluster_fits():
            POLICY_REGO_VM_FALLBACKS.labels("cluster").inc()
            return None
        try:
            vm = self._vm()
            vm.set_input_json(rego_input.raw.decode())
            raw = vm.execute_entry_point(self._entries[query])
        except Exception as exc:
            raise RegoEvaluationError(clean_error(str(exc))) from exc
        if UNDEFINED_MARK in raw:
            POLICY_REGO_VM_FALLBACKS.labels("undefined").inc()
            return None
        return orjson.loads(raw)

    def query(self, path: str, rego_input: RegoInput | None = None) -> Any:
        if path not in self._entries or rego_input is None:
            return self._interpreter.query(path, rego_input)
        value = self._evaluate(path, rego_input)
        if value is None:
            self.fallbacks += 1
            return self._interpreter.query(path, rego_input)
        return value

    def _forget_vm(self) -> None:
        self._vms.forget()

    def close(self) -> None:
        self._forget_vm()
        self._interpreter.close()


class RegorusVmEngine:
    """The embedded engine (`regorus`) with the RVM where it gives the interpreter's answers."""

    name = "regorus"

    def __init__(self, mode: RegoVmMode = "auto") -> None:
        self.mode = mode

    def prepare(self, modules: Mapping[str, str], data: Mapping[str, Any]) -> PreparedRego:
        interpreter = _PreparedRegorus(modules, data)  # refuses what does not parse
        if self.mode == "off":
            return interpreter
        try:
            prepared = _PreparedRvm(modules, data, interpreter)
        except RvmRefused as refused:
            if AGGREGATE_MODULE in modules:
                log.info("Rego policy set served by regorus' interpreter, not its compiled VM: %s", refused)
            return interpreter
        log.info("Rego policy set (%d modules) served by regorus' compiled VM", len(modules))
        return prepared


__all__ = [
    "EVERYTHING_ENTRY", "REGO_VM_ENV", "RegoVmMode", "RegorusVmEngine", "RvmRefused", "rego_evaluator",
    "rego_vm_mode", "rvm_aggregate_modules",
]
