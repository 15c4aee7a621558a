"""The built-in Rego policies' rules in Python, one function per policy (policies/engines/native_builtins.py
binds each to the module text it mirrors and answers the aggregate's documents with them). Any input whose
Rego meaning depends on a corner of the language raises `Declined`: the caller asks the engine instead.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

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


class Pod:
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


def _memory_limit(pod: Pod) -> set[str]:
    found = set()
    for container in pod.gpu_containers():
        memory = pod.limits(container).get("memory", _MISSING)
        if memory is _MISSING or memory is False:
            found.add(f"container {_quoted(container.get('name'))} uses GPUs but sets no memory limit")
    return found


def _privileged(pod: Pod) -> set[str]:
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
    return any(_gpu_resource(name) and not _zero_gpus(value) for name, value in Pod.limits(container).items())


def _visible_devices(pod: Pod) -> set[str]:
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
class Cluster:
    types: Mapping[str, Any]
    offers: frozenset[tuple[int, int, str, str]]  # mig_offers: (memory GB, compute slices, profile, type id)

    @classmethod
    def of(cls, cluster: Mapping[str, Any]) -> Cluster:
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


class Placement:
    """The intent and labels the placement built-ins read."""

    def __init__(self, document: Mapping[str, Any], cluster: Cluster) -> None:
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


def _inference_mig(ctx: Placement) -> dict[str, Any] | None:
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


def _namespace_mig(ctx: Placement) -> dict[str, Any] | None:
    if ctx.namespace_labels.get("kgwe.io/default-sharing", _MISSING) != "mig":
        return None
    if not (ctx.absent("sharing") and ctx.absent("profile")) or not ctx.requested_gpus <= 1:
        return None
    need = ctx.intent.get("gpuMemory", 0)
    return _mig_decision(ctx.cluster.smallest_mig(need if _is_number(need) else 0, ctx.intent_types()))


def _nvlink(ctx: Placement) -> dict[str, Any] | None:
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
