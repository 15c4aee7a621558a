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
   that fail on argument *types* alone (`_TYPE_ONLY_BUILTINS`) and use only instructions that cannot fail
   (`_SAFE_INSTRUCTIONS`: no arithmetic, `+ - * / %` fail on zero divisors and non-numbers).
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

import contextlib
import hashlib
import logging
import os
import re
from collections.abc import Iterable, Mapping
from typing import Any, Literal

import orjson

from policies.engines.aggregate import (
    AGGREGATE_MODULE,
    AGGREGATE_PACKAGE,
    CHECK_QUERY,
    DECISION_QUERY,
    EVERYTHING_QUERY,
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
from policies.kernel.metrics import POLICY_REGO_VM_FALLBACKS

log = logging.getLogger("kgwe.policies")

RegoVmMode = Literal["auto", "off"]
REGO_VM_ENV = "KGWE_REGO_VM"
RVM_PACKAGE = "kgwe.aggregate_rvm"
# The whole aggregate package as one rule: the RVM answers rules, not packages.
EVERYTHING_ENTRY = f"data.{RVM_PACKAGE}.everything"
RVM_AGGREGATE_MODULE = "kgwe-aggregate-rvm.rego"
# How the RVM prints an undefined value that leaked into a document.
UNDEFINED_MARK = '"<undefined>"'
_VMS_PER_THREAD = 4

# Built-ins that fail only when an argument has the wrong JSON type (never on a well-typed value).
_TYPE_ONLY_BUILTINS = frozenset({
    "array.concat", "array.reverse", "concat", "contains", "count", "endswith", "indexof", "intersection",
    "is_array", "is_boolean", "is_null", "is_number", "is_object", "is_set", "is_string", "lower", "max", "min",
    "object.get", "object.keys", "object.remove", "object.union", "replace", "sort", "split", "sprintf",
    "startswith", "strings.reverse", "trim", "trim_left", "trim_prefix", "trim_right", "trim_space",
    "trim_suffix", "type_name", "union", "upper",
})
# RVM instructions that cannot fail in the interpreter either (comparisons, loads, indexing, collection
# building, control flow). Arithmetic (`Add`, `Sub`, `Mul`, `Div`, `Mod`) can, and so may an instruction
# this list does not know yet: both keep a set that uses them outside the shipped modules off the RVM.
_SAFE_INSTRUCTIONS = frozenset({
    "ArrayCreate", "Assert", "AssertNotUndefined", "BuiltinCall", "CallRule", "ChainedIndex", "CompBegin",
    "CompYield", "Contains", "Count", "DestructuringSuccess", "Eq", "FunctionCall", "Ge", "Gt", "Index",
    "IndexLiteral", "Le", "Load", "LoadBool", "LoadData", "LoadInput", "LoopStart", "Lt", "Move", "Ne", "Not",
    "ObjectCreate", "ObjectSet", "Return", "RuleInit", "SetAdd", "SetCreate", "VirtualDataDocumentLookup",
})
_SECTION = re.compile(r"^; ===== (?:RULE|FUNCTION): (data\.[^ ]+) =====$")
_BUILTIN_CALL = re.compile(r"\bBuiltinCall\s+\S+\s+←\s+([\w.]+)\(")
_INSTRUCTION = re.compile(r"^\s*(?:\d+:)?\s+([A-Z]\w*)\s")
_EVERY = re.compile(r"\bLoopStart\s+every\b")
_LITERAL = re.compile(r"^;\s+L\s*(\d+): (.*)$")
_LOAD_LITERAL = re.compile(r"\bLoad\s+(r\d+)\s+←\s+L(\d+)\b")
_ARRAY_CREATE = re.compile(r"\bArrayCreate\s+(r\d+)\s+←\s+\[([^\]]*)\]")
_ASSIGNS = re.compile(r"^\s*(?:\d+:)?\s+[A-Z]\w*\s+(r\d+)\s+←")
_SPRINTF = re.compile(r"\bBuiltinCall\s+\S+\s+←\s+sprintf\((r\d+), (r\d+)\)")
# Go-style verbs: flags, width, precision, then the verb (`%%` is a literal percent sign).
_VERB = re.compile(r"%([-+# 0]*[0-9]*(?:\.[0-9]*)?)([a-zA-Z%\[])")
_PACKAGE = re.compile(r"^package\s+([\w.\"\[\]-]+)", re.MULTILINE)
_MIG_PROFILE = re.compile(r"^[0-9]{1,3}g\.")


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


def _shipped_digests() -> frozenset[str]:
    from rego import LIBRARY_DIR

    return frozenset(
        hashlib.sha256(path.read_bytes()).hexdigest()
        for path in LIBRARY_DIR.rglob("*.rego") if not path.name.endswith("_test.rego")
    )


_SHIPPED: frozenset[str] | None = None


def _packages(source: str) -> list[str]:
    return _PACKAGE.findall(source)


def _shipped_packages(modules: Mapping[str, str]) -> set[str]:
    global _SHIPPED
    if _SHIPPED is None:
        _SHIPPED = _shipped_digests()
    return {
        package for source in modules.values()
        if hashlib.sha256(source.encode("utf-8")).hexdigest() in _SHIPPED for package in _packages(source)
    }


def sprintf_risk(template: str, arguments: int) -> str | None:
    """Why `sprintf(template, [arguments values])` may fail on well-typed values (the interpreter fails on
    a verb without an argument, an argument without a verb, and `%d` of a fraction), or None. Only `%s`,
    `%v` and `%q` are accepted (`%q` fails only on a value of another type)."""
    verbs = [verb for _, verb in _VERB.findall(template) if verb != "%"]
    if any(verb not in "svq" for verb in verbs):
        return f"sprintf verb other than %s, %v, %q in {template!r}"
    if len(verbs) != arguments:
        return f"sprintf with {len(verbs)} verbs and {arguments} arguments"
    return None


def _owner(path: str, packages: Iterable[str]) -> str | None:
    """The package a rule path belongs to: the longest one it lies in (`kgwe.lib.pod.x` is not shipped
    because `kgwe.lib.pod` is)."""
    owners = [package for package in packages if path.startswith(f"data.{package}.")]
    return max(owners, key=len) if owners else None


def risky_constructs(listing: str, shipped_packages: Iterable[str], packages: Iterable[str] = ()) -> list[str]:
    """`rule: construct` for each construct outside the shipped modules that can fail on well-typed values
    (where the RVM would answer undefined and the interpreter fail), and each `every` anywhere.
    `packages`: every package of the set (a rule is shipped when its longest package is)."""
    shipped = frozenset(shipped_packages)
    known = [*shipped, *packages]
    found: list[str] = []
    rule: str | None = None
    literals: dict[str, Any] = {}
    # Per rule: what each register last held, when it was a literal or an array built in place.
    held: dict[str, tuple[str, Any]] = {}
    for line in listing.splitlines():
        literal = _LITERAL.match(line)
        if literal and rule is None:
            with contextlib.suppress(orjson.JSONDecodeError):  # unreadable: the format counts as computed
                literals[literal.group(1)] = orjson.loads(literal.group(2))
            continue
        section = _SECTION.match(line)
        if section:
            rule = section.group(1)
            held = {}
            continue
        template = _SPRINTF.search(line)
        if rule is not None and template:
            fmt, args = held.get(template.group(1)), held.get(template.group(2))
            if fmt is None or fmt[0] != "literal" or not isinstance(fmt[1], str) or args is None or args[0] != "array":
                why: str | None = "sprintf with a computed format or argument list"
            else:
                why = sprintf_risk(fmt[1], args[1])
            if why and _owner(rule, known) not in shipped:
                found.append(f"{rule}: {why}")
        assigned = _ASSIGNS.match(line)
        if assigned:
            loaded, created = _LOAD_LITERAL.search(line), _ARRAY_CREATE.search(line)
            if loaded:
                held[assigned.group(1)] = ("literal", literals.get(loaded.group(2)))
            elif created:
                inside = created.group(2).strip()
                held[assigned.group(1)] = ("array", len(inside.split(",")) if inside else 0)
            else:
                held.pop(assigned.group(1), None)
        if rule is None:
            continue
        if _EVERY.search(line):
            # Anywhere, the shipped modules included: the RVM binds `every`'s variables wrongly.
            found.append(f"{rule}: every")
            continue
        if _owner(rule, known) in shipped or rule.startswith(f"data.{RVM_PACKAGE}."):
            continue
        call = _BUILTIN_CALL.search(line)
        if call and call.group(1) not in _TYPE_ONLY_BUILTINS:
            found.append(f"{rule}: {call.group(1)}")
            continue
        instruction = _INSTRUCTION.match(line)
        if instruction and instruction.group(1) not in _SAFE_INSTRUCTIONS:
            found.append(f"{rule}: {instruction.group(1)}")
    return sorted(set(found))


def _strings(value: Any) -> bool:
    return isinstance(value, dict) and all(isinstance(v, str) for v in value.values())


def _plain_container(container: Any) -> bool:
    if not isinstance(container, dict):
        return False
    for key in ("name", "image"):
        if key in container and not isinstance(container[key], str):
            return False
    resources = container.get("resources", {})
    if not isinstance(resources, dict):
        return False
    if not all(_strings(resources.get(kind, {})) for kind in ("limits", "requests")):
        return False
    security = container.get("securityContext", {})
    if not isinstance(security, dict) or not isinstance(security.get("privileged", False), bool):
        return False
    env = container.get("env", [])
    if not isinstance(env, list):
        return False
    return all(
        isinstance(e, dict) and isinstance(e.get("name"), str) and isinstance(e.get("value", ""), str) for e in env
    )


def request_guard(document: Mapping[str, Any]) -> str | None:
    """None when the RVM may answer this admission input; else why the interpreter must (a shape the API
    server never sends, in a field the shipped policies read)."""
    # A part absent altogether is one the engine was not handed (policies/engines/rego_reads.py: no running
    # module reads it); the API server itself always sends `request`, its `object` and the pod's `spec`.
    request = document.get("request", {})
    if not isinstance(request, dict):
        return "no admission request"
    for key in ("uid", "operation", "namespace"):
        if not isinstance(request.get(key, ""), str):
            return f"request.{key} is not a string"
    user = request.get("userInfo", {})
    if not isinstance(user, dict) or not isinstance(user.get("username", ""), str):
        return "userInfo is not shaped as the API server sends it"
    groups = user.get("groups", [])
    if not isinstance(groups, list) or not all(isinstance(g, str) for g in groups):
        return "userInfo.groups is not a list of strings"
    pod = request.get("object", {})
    if not isinstance(pod, dict):
        return "no pod object"
    metadata = pod.get("metadata", {})
    if not isinstance(metadata, dict):
        return "metadata is not an object"
    if not all(isinstance(metadata.get(key, ""), str) for key in ("name", "namespace", "generateName")):
        return "the pod's name or namespace is not a string"
    if not _strings(metadata.get("labels", {})) or not _strings(metadata.get("annotations", {})):
        return "labels or annotations are not strings"
    spec = pod.get("spec", {})
    if not isinstance(spec, dict):
        return "no pod spec"
    for key in ("containers", "initContainers", "ephemeralContainers"):
        containers = spec.get(key, [])
        if not isinstance(containers, list) or not all(_plain_container(c) for c in containers):
            return f"spec.{key} is not shaped as the API server sends it"
    namespace = document.get("namespaceObject")
    if namespace is not None:
        if not isinstance(namespace, dict) or not isinstance(namespace.get("metadata", {}), dict):
            return "namespaceObject is not an object"
        if not _strings(namespace.get("metadata", {}).get("labels", {})):
            return "namespace labels are not strings"
    intent = document.get("intent", {})
    if not isinstance(intent, dict):
        return "intent is not an object"
    types = intent.get("acceleratorTypes")
    if types is not None and not (isinstance(types, list) and all(isinstance(t, str) for t in types)):
        return "intent.acceleratorTypes is not a list of strings"
    for key in ("gpus", "gpuMemory"):
        value = intent.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
            return f"intent.{key} is not a number"
    return None


def cluster_guard(cluster: Mapping[str, Any] | None) -> str | None:
    """None when every MIG profile name of the summary starts with `<N>g.` (the shipped library reads N
    with `to_number`, which fails on anything else)."""
    types = (cluster or {}).get("types", {})
    if not isinstance(types, dict):
        return "cluster types are not an object"
    for type_id, info in types.items():
        mig = info.get("mig", {}) if isinstance(info, dict) else None
        if not isinstance(mig, dict):
            return f"MIG offers of {type_id} are not an object"
        for profile in mig:
            if not _MIG_PROFILE.match(profile):
                return f"MIG profile {profile!r}"
    return None


# -- probes for the self-check ------------------------------------------------------------------

_PROBE_CLUSTER: dict[str, Any] = {
    "types": {
        "nvidia-a100-80gb": {"nodes": 2, "gpus": 16, "maxGpusPerNode": 8, "maxNvlinkDomain": 8, "nvswitch": True,
                             "memoryGB": 80, "mps": False, "timeSlicing": False, "cliques": [],
                             "mig": {"1g.10gb": {"devices": 14, "memoryGB": 10},
                                     "3g.40gb": {"devices": 4, "memoryGB": 40}}},
        "nvidia-l4": {"nodes": 1, "gpus": 2, "maxGpusPerNode": 2, "maxNvlinkDomain": 1, "nvswitch": False,
                      "memoryGB": 24, "mig": {}, "mps": True, "timeSlicing": True, "cliques": []},
    },
    "typeIds": ["nvidia-a100-80gb", "nvidia-l4"],
    "nodes": 3,
}


def _pod(containers: list[dict[str, Any]], labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "probe", "namespace": "default", "labels": labels or {}, "annotations": {}},
            "spec": {"containers": containers}}


def _intent(**fields: Any) -> dict[str, Any]:
    intent: dict[str, Any] = dict.fromkeys(("acceleratorTypes", "profile", "gpuMemory", "sharing", "gpuFraction",
                                            "topology", "gang", "gpus", "inference"))
    intent.update(fields)
    return intent


def probe_inputs(
    gated: Iterable[str], ungated: Iterable[str] = (),
) -> list[tuple[dict[str, Any] | None, dict[str, Any]]]:
    """(cluster, input) pairs for the load-time self-check: GPU and CPU pods, privileged and env corners,
    MIG and inference defaults, each with every GPUPolicy active and with none, and with every always-run
    policy answered natively (`input.kgwe.native`) and with none."""
    gpu = {"name": "main", "image": "registry.example/cuda:12",
           "resources": {"limits": {"nvidia.com/gpu": "2", "memory": "8Gi"}}, "securityContext": {}}
    odd = {"name": "side", "image": "busybox", "env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}],
           "resources": {}, "securityContext": {"privileged": True}}
    small = {"name": "infer", "image": "triton", "resources": {"limits": {"nvidia.com/gpu": "1"}}}
    cases = [
        (_pod([gpu]), None, _intent(gpus=2)),
        (_pod([gpu, odd]), {"metadata": {"name": "default", "labels": {}}}, _intent(gpus=2, topology="none")),
        (_pod([small], {"kgwe.io/workload": "inference"}),
         {"metadata": {"name": "ml", "labels": {"kgwe.io/default-sharing": "mig"}}},
         _intent(gpus=1, gpuMemory=10 * 1024**3, inference=True)),
        (_pod([{**small, "securityContext": {"privileged": True}}]),
         {"metadata": {"name": "ml", "labels": {"kgwe.io/default-sharing": "mig"}}},
         _intent(gpus=1, acceleratorTypes=["nvidia-a100-80gb"])),
        (_pod([{"name": "cpu", "image": "nginx"}]), None, _intent()),
        # Every intent field set, as the webhook writes them (a policy reading one with the wrong type fails).
        (_pod([gpu], {"owner": "alice"}), {"metadata": {"name": "default", "labels": {"team": "a"}}},
         _intent(acceleratorTypes=["nvidia-a100-80gb"], profile="1g.10gb", gpuMemory=10 * 1024**3,
                 sharing="mig", gpuFraction=0.5, topology="nvlink", gang="g", gpus=1, inference=False)),
    ]
    names = list(gated)
    always = list(ungated)
    combinations = [(names, []), ([], []), *([(names, always)] if always else [])]
    probes: list[tuple[dict[str, Any] | None, dict[str, Any]]] = []
    for cluster in (None, _PROBE_CLUSTER):
        for pod, namespace, intent in cases:
            for active, native in combinations:
                kgwe: dict[str, Any] = {"active": dict.fromkeys(active, True)}
                if native:
                    kgwe["native"] = dict.fromkeys(native, True)
                probes.append((cluster, {
                    "request": {"uid": "probe", "operation": "CREATE", "namespace": "default", "object": pod,
                                "userInfo": {"username": "probe", "groups": ["system:authenticated"]}},
                    "namespaceObject": namespace, "intent": intent, "tenant": None, "params": {},
                    "kgwe": kgwe,
                }))
    return probes


def same_document(left: Any, right: Any) -> bool:
    """Byte-identical as JSON with sorted keys: 8 and 8.0, or true and 1, are different answers."""
    try:
        return orjson.dumps(left, option=orjson.OPT_SORT_KEYS) == orjson.dumps(right, option=orjson.OPT_SORT_KEYS)
    except TypeError:
        return False


# -- the prepared set ---------------------------------------------------------------------------


class RvmRefused(Exception):
    """This set is not served on the RVM (the message says why); the interpreter serves it."""


class _PreparedRvm:
    """The RVM for the aggregate queries; everything else, and every input the guards refuse, goes to the
    interpreter prepared for the same set. Both see the same `set_cluster`."""

    engine_name = "regorus"
    evaluator = "rvm"

    def __init__(self, modules: Mapping[str, str], data: Mapping[str, Any], interpreter: _PreparedRegorus) -> None:
        self._interpreter = interpreter
        gathered = gathered_from_module(modules.get(AGGREGATE_MODULE, ""))
        if gathered is None:
            raise RvmRefused("no KGWE aggregate module")
        own = [name for name, source in modules.items() if name != AGGREGATE_MODULE
               for p in _packages(source) if p == RVM_PACKAGE or p.startswith(RVM_PACKAGE + ".")]
        if own:
            raise RvmRefused(f"module {own[0]} uses package {RVM_PACKAGE}")
        self._entries: dict[str, str] = {CHECK_QUERY: CHECK_QUERY, EVERYTHING_QUERY: EVERYTHING_ENTRY}
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
        self._data = dict(data)
        self._data_json = orjson.dumps(self._data, default=_json_default).decode()
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
        packages = {package for source in modules.values() for package in _packages(source)}
        risky = risky_constructs(program.generate_listing(), _shipped_packages(modules), packages)
        if risky:
            more = f" and {len(risky) - 3} more" if len(risky) > 3 else ""
            raise RvmRefused(f"may fail where the RVM answers undefined: {', '.join(risky[:3])}{more}")
        self._binary = bytes(program.serialize_binary())
        self._cluster: Mapping[str, Any] | None = None
        self._cluster_ok: tuple[Mapping[str, Any] | None, bool] = (None, True)
        self._vms = ThreadBound("vms", self._build_vm, self._load_data, _VMS_PER_THREAD)
        self.fallbacks = 0  # requests the interpreter answered (guards); read by tests and the bench
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
    "EVERYTHING_ENTRY", "REGO_VM_ENV", "RegoVmMode", "RegorusVmEngine", "RvmRefused",
    "cluster_guard", "probe_inputs", "rego_evaluator", "rego_vm_mode", "request_guard", "risky_constructs",
    "rvm_aggregate_modules", "same_document",
]
