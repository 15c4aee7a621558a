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
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from policies.engines.aggregate import EVERYTHING_QUERY, QUERY_KINDS, query_value

# The module texts the Python below mirrors, by package.
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

GPU_RESOURCES = ("nvidia.com/gpu", "amd.com/gpu")
MIG_PREFIX = "nvidia.com/mig-"
DRA_EXTENDED_PREFIX = "deviceclass.resource.kubernetes.io/"
ALLOWED_VISIBLE_DEVICES = frozenset({"void", "none", ""})
INFERENCE_MAX_MEMORY_BYTES = 21474836480  # 20Gi, as in inference_mig.rego
GIB = 1073741824
_MISSING: Any = object()
# `%q` of these strings is the string in double quotes, in Go, OPA and regorus alike.
_PLAIN = re.compile(r'[ !#-\[\]-~]*')
_PROFILE_SLICES = re.compile(r"([0-9]+)g\.")


class Declined(Exception):
    """The input reaches a corner where only the Rego engine is authoritative: ask it."""


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
        pod = _Pod(document)
        for name, (kind, check) in checks.items():
            found[kind][name] = sorted(check(pod))
        return {kind: found[kind] for kind in ("deny", "warn") if any(CHECKS[n][0] == kind for n in checks)}

    def _decision(self, document: Mapping[str, Any], cluster: Mapping[str, Any]) -> dict[str, Any]:
        decided: dict[str, Any] = {}
        chosen = [name for name in self._policies if name in DECISIONS]
        if not chosen:
            return decided
        context = _Placement(document, self._cluster_offers(cluster))
        for name in chosen:
            partial = DECISIONS[name](context)
            if partial is not None:
                decided[name] = partial
        return decided

    def _cluster_offers(self, cluster: Mapping[str, Any]) -> _Cluster:
        """`cluster_types` and `mig_offers` of lib/pod.rego, computed once per cluster summary object."""
        cached = self._offers
        if cached is not None and cached[0] is cluster:
            found = cached[1]
        else:
            try:
                found = _Cluster.of(cluster)
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


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _quoted(value: Any) -> str:
    """sprintf's `%q` of a string that needs no escaping; anything else is declined."""
    if not isinstance(value, str) or _PLAIN.fullmatch(value) is None:
        raise Declined("%q of a value that is not a plain string")
    return f'"{value}"'


def _object_or_empty(value: Any) -> Mapping[str, Any]:
    """A field that Rego walks into: absent is empty, an object is itself, anything else is declined."""
    if value is _MISSING:
        return {}
    if not isinstance(value, dict):
        raise Declined("a field that is not an object")
    return value


class _Pod:
    """`pod`, `containers`, `is_gpu_container`, `gpu_containers` and `is_gpu_pod` of lib/pod.rego for one input."""

    def __init__(self, document: Mapping[str, Any]) -> None:
        request = document.get("request")
        pod = request.get("object") if isinstance(request, dict) else None
        if not isinstance(pod, dict) or not isinstance(pod.get("spec"), dict):
            raise Declined("no pod spec")
        spec = pod["spec"]
        containers: list[dict[str, Any]] = []
        for key in ("containers", "initContainers", "ephemeralContainers"):
            listed = spec.get(key, [])
            if not isinstance(listed, list) or not all(isinstance(c, dict) for c in listed):
                raise Declined(f"spec.{key} is not a list of objects")
            containers.extend(listed)
        self.containers = containers
        self.gpu = [self.is_gpu_container(c) for c in containers]
        claims = spec.get("resourceClaims", [])
        if not isinstance(claims, list):
            raise Declined("spec.resourceClaims is not a list")
        self.is_gpu_pod = any(self.gpu) or len(claims) > 0

    @staticmethod
    def limits(container: Mapping[str, Any]) -> Mapping[str, Any]:
        resources = _object_or_empty(container.get("resources", _MISSING))
        return _object_or_empty(resources.get("limits", _MISSING))

    @classmethod
    def is_gpu_container(cls, container: Mapping[str, Any]) -> bool:
        limits = cls.limits(container)
        for name in GPU_RESOURCES:
            value = limits.get(name, _MISSING)
            if value is None:
                raise Declined("a null GPU limit")
            if value is not _MISSING and value is not False:
                return True  # a defined value that is not `false` is a true expression in Rego
        if any(isinstance(name, str) and name.startswith((MIG_PREFIX, DRA_EXTENDED_PREFIX)) for name in limits):
            return True
        claims = _object_or_empty(container.get("resources", _MISSING)).get("claims", _MISSING)
        if claims is _MISSING:
            return False
        if not isinstance(claims, list):
            raise Declined("resources.claims is not a list")
        return len(claims) > 0

    def gpu_containers(self) -> list[Mapping[str, Any]]:
        return [c for c, gpu in zip(self.containers, self.gpu, strict=True) if gpu]


def _memory_limit(pod: _Pod) -> set[str]:
    found = set()
    for container in pod.gpu_containers():
        memory = pod.limits(container).get("memory", _MISSING)
        if memory is _MISSING or memory is False:
            found.add(f"container {_quoted(container.get('name'))} uses GPUs but sets no memory limit")
    return found


def _privileged(pod: _Pod) -> set[str]:
    found = set()
    for container, gpu in zip(pod.containers, pod.gpu, strict=True):
        if not gpu and not pod.is_gpu_pod:
            continue
        context = container.get("securityContext", _MISSING)
        if context is not _MISSING and not isinstance(context, dict):
            raise Declined("securityContext is not an object")
        if context is _MISSING or context.get("privileged") is not True:
            continue
        name = _quoted(container.get("name"))
        found.add(
            f"container {name} uses GPUs and is privileged; privileged containers see every GPU on the node" if gpu
            else f"container {name} is privileged in a pod that uses GPUs; privileged containers see every GPU "
                 "on the node"
        )
    return found


def _zero_gpus(value: Any) -> bool:
    """`value in {"0", 0, false}` as Rego has it (a bool is never a number there, 0.0 is 0)."""
    return value is False or value == "0" or (_is_number(value) and value == 0)


def _gpu_resource(name: Any) -> bool:
    """`gpu_resource` of visible_devices.rego."""
    return name in GPU_RESOURCES or (isinstance(name, str) and name.startswith(MIG_PREFIX))


def _nonzero_gpu_limit(container: Mapping[str, Any]) -> bool:
    """What `receives_gpus` of visible_devices.rego adds to `is_gpu_container`: a GPU or MIG limit not zero."""
    return any(_gpu_resource(name) and not _zero_gpus(value) for name, value in _Pod.limits(container).items())


def _visible_devices(pod: _Pod) -> set[str]:
    found = set()
    for container, gpu in zip(pod.containers, pod.gpu, strict=True):
        if gpu and _nonzero_gpu_limit(container):  # `receives_gpus`: `gpu` is `is_gpu_container`
            continue
        env = container.get("env", [])
        if not isinstance(env, list) or not all(isinstance(e, dict) for e in env):
            raise Declined("env is not a list of objects")
        for variable in env:
            if variable.get("name") != "NVIDIA_VISIBLE_DEVICES":
                continue
            value = variable.get("value", "")
            if not isinstance(value, str):
                raise Declined("a non-string NVIDIA_VISIBLE_DEVICES")
            if value not in ALLOWED_VISIBLE_DEVICES:
                found.add(f"container {_quoted(container.get('name'))} sets NVIDIA_VISIBLE_DEVICES="
                          f"{_quoted(value)} without asking for a GPU")
            if variable.get("valueFrom", None) is not None:
                found.add(f"container {_quoted(container.get('name'))} takes NVIDIA_VISIBLE_DEVICES from "
                          "valueFrom without asking for a GPU")
    return found


@dataclass(frozen=True)
class _Cluster:
    types: Mapping[str, Any]
    offers: frozenset[tuple[int, int, str, str]]  # mig_offers: (memory GB, compute slices, profile, type id)

    @classmethod
    def of(cls, cluster: Mapping[str, Any]) -> _Cluster:
        types = cluster.get("types", {})
        if not isinstance(types, dict):
            raise Declined("cluster types are not an object")
        offers = set()
        for type_id, summary in types.items():
            if not isinstance(summary, dict):
                raise Declined("a cluster type that is not an object")
            mig = summary.get("mig", {})
            if not isinstance(mig, dict):
                raise Declined("a MIG offer list that is not an object")
            for profile, info in mig.items():
                if not isinstance(info, dict):
                    raise Declined("a MIG offer that is not an object")
                devices, memory = info.get("devices", _MISSING), info.get("memoryGB", _MISSING)
                if devices is _MISSING or (_is_number(devices) and devices <= 0):
                    continue
                if not _is_number(devices):
                    raise Declined("MIG devices that are not a number")
                if not _is_number(memory):
                    continue
                if not isinstance(memory, int):
                    raise Declined("fractional MIG memory")
                slices = _PROFILE_SLICES.match(profile)
                if slices is None:
                    raise Declined(f"MIG profile {profile!r}")
                offers.add((memory, int(slices.group(1)), profile, type_id))
        return cls(types, frozenset(offers))

    def smallest_mig(self, need_bytes: Any, types: list[Any]) -> tuple[str, list[str]] | None:
        if not _is_number(need_bytes) or not isinstance(need_bytes, int):
            raise Declined("a memory need that is not a whole number")

        def allowed(type_id: str) -> bool:
            return len(types) == 0 or type_id in types

        fitting = {(mem, slices, profile) for mem, slices, profile, type_id in self.offers
                   if allowed(type_id) and mem * GIB >= need_bytes}
        if not fitting:
            return None
        profile = min(fitting)[2]
        return profile, sorted(t for _, _, p, t in self.offers if p == profile and allowed(t))


class _Placement:
    """The intent and labels the placement built-ins read."""

    def __init__(self, document: Mapping[str, Any], cluster: _Cluster) -> None:
        intent = document.get("intent", {})
        if not isinstance(intent, dict):
            raise Declined("intent is not an object")
        self.intent = intent
        self.cluster = cluster
        gpus = intent.get("gpus", 0)
        if not _is_number(gpus):
            raise Declined("requested GPUs are not a number")
        self.requested_gpus = gpus
        request = document.get("request")
        pod = request.get("object") if isinstance(request, dict) else None
        metadata = pod.get("metadata") if isinstance(pod, dict) else None
        metadata = metadata if isinstance(metadata, dict) else {}
        labels, annotations = metadata.get("labels"), metadata.get("annotations")
        self.labels: Mapping[str, Any] = labels if isinstance(labels, dict) else {}
        self.annotations: Mapping[str, Any] = annotations if isinstance(annotations, dict) else {}
        namespace = document.get("namespaceObject")
        ns_metadata = namespace.get("metadata") if isinstance(namespace, dict) else None
        ns_labels = ns_metadata.get("labels") if isinstance(ns_metadata, dict) else None
        self.namespace_labels: Mapping[str, Any] = ns_labels if isinstance(ns_labels, dict) else {}

    def absent(self, key: str) -> bool:
        return self.intent.get(key) is None

    def intent_types(self) -> list[Any]:
        if self.absent("acceleratorTypes"):
            return []
        types = self.intent["acceleratorTypes"]
        if not isinstance(types, list) or not all(isinstance(t, str) for t in types):
            raise Declined("acceleratorTypes is not a list of strings")
        return types

    def is_inference(self) -> bool:
        return (
            self.intent.get("inference") is True
            or self.labels.get("kgwe.io/workload", _MISSING) == "inference"
            or self.annotations.get("kgwe.io/workload", _MISSING) == "inference"
        )


def _mig_decision(found: tuple[str, list[str]] | None) -> dict[str, Any] | None:
    if found is None:
        return None
    profile, types = found
    return {"acceleratorTypes": types, "sharing": {"mode": "mig", "migProfile": profile}}


def _inference_mig(ctx: _Placement) -> dict[str, Any] | None:
    if not ctx.is_inference():
        return None
    if not (ctx.absent("acceleratorTypes") and ctx.absent("profile") and ctx.absent("sharing")):
        return None
    if not ctx.requested_gpus <= 1:
        return None
    need = ctx.intent.get("gpuMemory", _MISSING)
    if not _is_number(need) or not need <= INFERENCE_MAX_MEMORY_BYTES:
        return None
    return _mig_decision(ctx.cluster.smallest_mig(need, []))


def _namespace_mig(ctx: _Placement) -> dict[str, Any] | None:
    if ctx.namespace_labels.get("kgwe.io/default-sharing", _MISSING) != "mig":
        return None
    if not (ctx.absent("sharing") and ctx.absent("profile")) or not ctx.requested_gpus <= 1:
        return None
    need = ctx.intent.get("gpuMemory", 0)
    return _mig_decision(ctx.cluster.smallest_mig(need if _is_number(need) else 0, ctx.intent_types()))


def _nvlink(ctx: _Placement) -> dict[str, Any] | None:
    if not ctx.absent("topology") or not ctx.requested_gpus > 1:
        return None
    types = ctx.intent_types()
    if not types:
        types = []
        for type_id, summary in ctx.cluster.types.items():
            if type_id == "unknown":
                continue
            largest = summary.get("maxGpusPerNode", _MISSING)
            if largest is _MISSING:
                continue
            if not _is_number(largest):
                raise Declined("maxGpusPerNode is not a number")
            if largest >= ctx.requested_gpus:
                types.append(type_id)
    if not types:
        return None
    for type_id in types:
        summary = ctx.cluster.types.get(type_id)
        if not isinstance(summary, dict) or summary.get("nvswitch") is not True:
            return None
    return {"topology": "nvlink"}


CHECKS = {
    "kgwe.admission.memory_limit": ("warn", _memory_limit),
    "kgwe.admission.privileged": ("deny", _privileged),
    "kgwe.admission.visible_devices": ("deny", _visible_devices),
}
DECISIONS = {
    "kgwe.placement.inference_mig": _inference_mig,
    "kgwe.placement.namespace_mig": _namespace_mig,
    "kgwe.placement.nvlink": _nvlink,
}
