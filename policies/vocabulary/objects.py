"""Thin typed read-only views of Kubernetes objects: any object's metadata, pods and their containers, nodes.

A view wraps the object's dict; it never copies it. The mutation pipeline changes the pod in place and
the policy engines take it as JSON, so the dict stays the object and the view only reads it, live: a
property reads the dict each time it is asked (a key the pipeline adds is seen at once), which costs a
dict lookup or two, no more than the `.get("metadata") or {}` it replaces.

Every property tolerates the shapes a hostile pod creator or a forged request may send and
`webhook/admission/bounds.py` lets through (objects read from the cluster are not bounded at all): a
part of the wrong type reads as empty, never raises. Metadata a list is no metadata; containers a
mapping are no containers; a container that is not an object is left out; a label or annotation
whose value is not a string is left out (the API server stores only strings there, so such a value is
not a label any rule may match). Mappings are returned as the live dicts when they hold the right
types (read-only by contract: the `Mapping` type says so), so reading one allocates nothing.

Pure functions over plain data, like the rest of the vocabulary: every layer may import this module.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

# The empty answer for a missing or malformed mapping: immutable, so no caller can write into it.
EMPTY: Mapping[str, Any] = MappingProxyType({})

POD_TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})


def mapping(value: Any) -> Mapping[str, Any]:
    """`value` when it is a JSON object, else the empty mapping."""
    return value if isinstance(value, dict) else EMPTY


def string(value: Any) -> str:
    """`value` when it is a string, else ""."""
    return value if isinstance(value, str) else ""


def objects(value: Any) -> tuple[Mapping[str, Any], ...]:
    """The JSON objects of a list (other items left out); () when `value` is not a list."""
    if not isinstance(value, list):
        return ()
    return tuple([item for item in value if isinstance(item, dict)])


def string_map(value: Any) -> Mapping[str, str]:
    """A `map[string]string` (labels, annotations, nodeSelector): the dict itself when every key and
    value is a string (the API server's case: nothing is copied), else a copy of its string entries."""
    if not isinstance(value, dict):
        return EMPTY
    for key, item in value.items():
        if not (isinstance(item, str) and isinstance(key, str)):
            return {k: v for k, v in value.items() if isinstance(k, str) and isinstance(v, str)}
    return value


def value_at(raw: Mapping[str, Any], part: str, key: str) -> Any:
    """`raw[part][key]`, or None where `raw[part]` is not an object (one call: properties are hot)."""
    container = raw.get(part)
    return container.get(key) if isinstance(container, dict) else None


def _str_at(raw: Mapping[str, Any], part: str, key: str) -> str:
    container = raw.get(part)
    value = container.get(key) if isinstance(container, dict) else None
    return value if isinstance(value, str) else ""


def map_at(raw: Mapping[str, Any], part: str, key: str) -> Mapping[str, Any]:
    container = raw.get(part)
    value = container.get(key) if isinstance(container, dict) else None
    return value if isinstance(value, dict) else EMPTY


class ObjectView:
    """Any Kubernetes object: its kind, metadata, spec and status, read through the dict it wraps."""

    __slots__ = ("raw",)

    def __init__(self, raw: Mapping[str, Any] | None) -> None:
        # Not a mapping (None, a list from a forged request): the view of an empty object. Its parts
        # are read as JSON, where every object is a dict.
        # (None first: a negative check against the Mapping ABC is slow.)
        self.raw: Mapping[str, Any] = (
            raw if isinstance(raw, dict) or (raw is not None and isinstance(raw, Mapping)) else EMPTY
        )

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.namespace}/{self.name or self.generate_name or '?'})"

    # -- type -------------------------------------------------------------------------------------
    @property
    def api_version(self) -> str:
        return string(self.raw.get("apiVersion"))

    @property
    def kind(self) -> str:
        return string(self.raw.get("kind"))

    # -- metadata ---------------------------------------------------------------------------------
    @property
    def metadata(self) -> Mapping[str, Any]:
        return mapping(self.raw.get("metadata"))

    @property
    def name(self) -> str:
        return _str_at(self.raw, "metadata", "name")

    @property
    def generate_name(self) -> str:
        return _str_at(self.raw, "metadata", "generateName")

    @property
    def namespace(self) -> str:
        """The namespace as written ("" when absent; the caller knows whether that means `default`)."""
        return _str_at(self.raw, "metadata", "namespace")

    @property
    def uid(self) -> str:
        return _str_at(self.raw, "metadata", "uid")

    @property
    def resource_version(self) -> str:
        return _str_at(self.raw, "metadata", "resourceVersion")

    @property
    def generation(self) -> int | None:
        value = value_at(self.raw, "metadata", "generation")
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    @property
    def creation_timestamp(self) -> str:
        return _str_at(self.raw, "metadata", "creationTimestamp")

    @property
    def deletion_timestamp(self) -> str | None:
        """When deletion was asked (RFC 3339), None while the object is not being deleted."""
        value = value_at(self.raw, "metadata", "deletionTimestamp")
        return value if isinstance(value, str) and value else None

    @property
    def labels(self) -> Mapping[str, str]:
        return string_map(value_at(self.raw, "metadata", "labels"))

    @property
    def annotations(self) -> Mapping[str, str]:
        return string_map(value_at(self.raw, "metadata", "annotations"))

    def label(self, key: str) -> str | None:
        """One label's value; None when absent or not a string. Constant time (no map is checked)."""
        metadata = self.raw.get("metadata")
        labels = metadata.get("labels") if isinstance(metadata, dict) else None
        value = labels.get(key) if isinstance(labels, dict) else None
        return value if isinstance(value, str) else None

    def annotation(self, key: str) -> str | None:
        """One annotation's value; None when absent or not a string. Constant time."""
        metadata = self.raw.get("metadata")
        notes = metadata.get("annotations") if isinstance(metadata, dict) else None
        value = notes.get(key) if isinstance(notes, dict) else None
        return value if isinstance(value, str) else None

    def has_key_with_prefix(self, prefix: str) -> bool:
        """Whether any label or annotation key starts with `prefix`, whatever its value: a key alone
        decides scope (`kgwe.io/`), so values of the wrong type do not hide it here."""
        metadata = self.metadata
        for section in ("annotations", "labels"):
            for key in mapping(metadata.get(section)):
                if isinstance(key, str) and key.startswith(prefix):
                    return True
        return False

    @property
    def owner_references(self) -> tuple[Mapping[str, Any], ...]:
        return objects(value_at(self.raw, "metadata", "ownerReferences"))

    @property
    def controller_owner(self) -> Mapping[str, Any] | None:
        """The owner reference with `controller: true` (at most one in a valid object), if any."""
        for owner in self.owner_references:
            if owner.get("controller") is True:
                return owner
        return None

    @property
    def finalizers(self) -> tuple[str, ...]:
        value = value_at(self.raw, "metadata", "finalizers")
        return tuple(f for f in value if isinstance(f, str)) if isinstance(value, list) else ()

    # -- spec and status --------------------------------------------------------------------------
    @property
    def spec(self) -> Mapping[str, Any]:
        return mapping(self.raw.get("spec"))

    @property
    def status(self) -> Mapping[str, Any]:
        return mapping(self.raw.get("status"))


class ContainerView:
    """One container (app, init or ephemeral) of a pod: name, resources, env, read through its dict."""

    __slots__ = ("raw",)

    def __init__(self, raw: Mapping[str, Any]) -> None:
        self.raw: Mapping[str, Any] = raw if isinstance(raw, dict) else EMPTY

    def __repr__(self) -> str:
        return f"ContainerView({self.name or '?'})"

    @property
    def name(self) -> str:
        return string(self.raw.get("name"))

    @property
    def image(self) -> str:
        return string(self.raw.get("image"))

    @property
    def resources(self) -> Mapping[str, Any]:
        return mapping(self.raw.get("resources"))

    @property
    def requests(self) -> Mapping[str, Any]:
        """Resource name -> quantity as written (a string or a number; parse with `quantities`)."""
        return map_at(self.raw, "resources", "requests")

    @property
    def limits(self) -> Mapping[str, Any]:
        """Resource name -> quantity as written (a string or a number; parse with `quantities`)."""
        return map_at(self.raw, "resources", "limits")

    def amounts(self) -> tuple[Mapping[str, Any], Mapping[str, Any]]:
        """(limits, requests) in one read."""
        return container_amounts(self.raw)

    @property
    def claims(self) -> tuple[Mapping[str, Any], ...]:
        """The DRA resource claims the container uses (`resources.claims`, each `{name: ...}`)."""
        return objects(value_at(self.raw, "resources", "claims"))

    @property
    def env(self) -> tuple[Mapping[str, Any], ...]:
        return objects(self.raw.get("env"))

    @property
    def restart_policy(self) -> str:
        return string(self.raw.get("restartPolicy"))

    @property
    def is_sidecar(self) -> bool:
        """An init container that keeps running beside the app containers (restartPolicy Always)."""
        return self.raw.get("restartPolicy") == "Always"


def container_amounts(container: Mapping[str, Any]) -> tuple[Mapping[str, Any], Mapping[str, Any]]:
    """(limits, requests) of a container object, each resource name -> quantity as written; empty where
    malformed. For loops over every container of many pods (GPU demand), where a ContainerView per
    container would be the largest cost of reading them."""
    resources = container.get("resources")
    if not isinstance(resources, dict):
        return EMPTY, EMPTY
    limits, requests = resources.get("limits"), resources.get("requests")
    return (limits if isinstance(limits, dict) else EMPTY, requests if isinstance(requests, dict) else EMPTY)


_new = object.__new__


def _containers(value: list[Any]) -> tuple[ContainerView, ...]:
    # Built without __init__ (its type check is done here): GPU demand reads every pod's containers
    # several times per admission, and this is most of what a view costs there.
    views = []
    for item in value:
        if isinstance(item, dict):
            view = _new(ContainerView)
            view.raw = item
            views.append(view)
    return tuple(views)


class PodView(ObjectView):
    """A pod: its metadata (ObjectView), the spec fields KGWE reads, its phase."""

    __slots__ = ()

    @property
    def node_name(self) -> str:
        """The node the pod is bound to; "" while unscheduled."""
        return _str_at(self.raw, "spec", "nodeName")

    @property
    def node_selector(self) -> Mapping[str, str]:
        return string_map(value_at(self.raw, "spec", "nodeSelector"))

    @property
    def scheduling_gates(self) -> tuple[str, ...]:
        """The names of the pod's scheduling gates, in order (gates without a string name left out)."""
        gates = objects(value_at(self.raw, "spec", "schedulingGates"))
        return tuple([gate["name"] for gate in gates if isinstance(gate.get("name"), str)])

    @property
    def pod_group_name(self) -> str:
        """`spec.schedulingGroup.podGroupName`: the PodGroup (native gang scheduling, Kubernetes 1.36) the pod
        joins; "" when it names none."""
        return string(mapping(value_at(self.raw, "spec", "schedulingGroup")).get("podGroupName"))

    @property
    def tolerations(self) -> tuple[Mapping[str, Any], ...]:
        return objects(value_at(self.raw, "spec", "tolerations"))

    @property
    def affinity(self) -> Mapping[str, Any]:
        return map_at(self.raw, "spec", "affinity")

    @property
    def resource_claims(self) -> tuple[Mapping[str, Any], ...]:
        """The pod's DRA claims (`spec.resourceClaims`, each `{name, resourceClaimName | ...TemplateName}`)."""
        return objects(value_at(self.raw, "spec", "resourceClaims"))

    @property
    def service_account_name(self) -> str:
        return _str_at(self.raw, "spec", "serviceAccountName")

    @property
    def scheduler_name(self) -> str:
        return _str_at(self.raw, "spec", "schedulerName")

    @property
    def priority_class_name(self) -> str:
        return _str_at(self.raw, "spec", "priorityClassName")

    @property
    def containers(self) -> tuple[ContainerView, ...]:
        spec = self.raw.get("spec")
        value = spec.get("containers") if isinstance(spec, dict) else None
        return _containers(value) if isinstance(value, list) else ()

    @property
    def init_containers(self) -> tuple[ContainerView, ...]:
        spec = self.raw.get("spec")
        value = spec.get("initContainers") if isinstance(spec, dict) else None
        return _containers(value) if isinstance(value, list) else ()

    @property
    def ephemeral_containers(self) -> tuple[ContainerView, ...]:
        value = value_at(self.raw, "spec", "ephemeralContainers")
        return _containers(value) if isinstance(value, list) else ()

    @property
    def all_containers(self) -> tuple[ContainerView, ...]:
        """App containers, then init containers (ephemeral ones ask for no resources)."""
        return self.containers + self.init_containers

    @property
    def phase(self) -> str:
        return _str_at(self.raw, "status", "phase")

    @property
    def terminal(self) -> bool:
        """Succeeded or Failed: the pod holds no resources any more."""
        return self.phase in POD_TERMINAL_PHASES

    @property
    def deleting(self) -> bool:
        return self.deletion_timestamp is not None


def pod_view(pod: PodView | Mapping[str, Any] | None) -> PodView:
    """`pod` itself when it is a view already, else a view of the dict: for functions that take either."""
    return pod if isinstance(pod, PodView) else PodView(pod)


def object_view(obj: ObjectView | Mapping[str, Any] | None) -> ObjectView:
    """`obj` itself when it is a view already, else a view of the dict."""
    return obj if isinstance(obj, ObjectView) else ObjectView(obj)
