"""What keeps a policy set off regorus' compiled VM (policies/engines/rego_rvm.py) where it might not give
the interpreter's answers: constructs found in the compiled listing, requests and cluster summaries
outside what the load-time self-check covered, and the probe inputs of that self-check.
"""

from __future__ import annotations

import contextlib
import hashlib
import re
from collections.abc import Iterable, Mapping
from typing import Any

import orjson

from policies.engines.aggregate import RVM_PACKAGE

# Built-ins that fail only when an argument has the wrong JSON type (never on a well-typed value).
TYPE_ONLY_BUILTINS = frozenset({
    "array.concat", "array.reverse", "concat", "contains", "count", "endswith", "indexof", "intersection",
    "is_array", "is_boolean", "is_null", "is_number", "is_object", "is_set", "is_string", "lower", "max", "min",
    "object.get", "object.keys", "object.remove", "object.union", "replace", "sort", "split", "sprintf",
    "startswith", "strings.reverse", "trim", "trim_left", "trim_prefix", "trim_right", "trim_space",
    "trim_suffix", "type_name", "union", "upper",
})


# RVM instructions that cannot fail in the interpreter either (comparisons, loads, indexing, collection
# building, control flow). Arithmetic (`Add`, `Sub`, `Mul`, `Div`, `Mod`) can, and so may an instruction
# this list does not know yet: both keep a set that uses them outside the shipped modules off the RVM.
SAFE_INSTRUCTIONS = frozenset({
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


def _shipped_digests() -> frozenset[str]:
    from rego import LIBRARY_DIR

    return frozenset(
        hashlib.sha256(path.read_bytes()).hexdigest()
        for path in LIBRARY_DIR.rglob("*.rego") if not path.name.endswith("_test.rego")
    )


_SHIPPED: frozenset[str] | None = None


def module_packages(source: str) -> list[str]:
    return _PACKAGE.findall(source)


def shipped_packages_of(modules: Mapping[str, str]) -> set[str]:
    global _SHIPPED
    if _SHIPPED is None:
        _SHIPPED = _shipped_digests()
    return {
        package for source in modules.values()
        if hashlib.sha256(source.encode("utf-8")).hexdigest() in _SHIPPED for package in module_packages(source)
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
        if call and call.group(1) not in TYPE_ONLY_BUILTINS:
            found.append(f"{rule}: {call.group(1)}")
            continue
        instruction = _INSTRUCTION.match(line)
        if instruction and instruction.group(1) not in SAFE_INSTRUCTIONS:
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
