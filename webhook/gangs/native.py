"""Native gang scheduling: a sized gang expressed through kube-scheduler's Workload API (Kubernetes 1.36).

Where API discovery finds `scheduling.k8s.io/v1alpha2` serving `workloads` and `podgroups` (the API server's
GenericWorkload gate, docs/gangs.md "With the Workload API"), a sized gang gets, besides everything of the
classic path (gate, record, room, pin):

- at admission (`/mutate`, pod CREATE): `spec.schedulingGroup.podGroupName` naming the gang's PodGroup, a name
  derived from the gang's name alone (`pod_group_name`), because the field can be set only at CREATE; admission
  writes nothing to the API (the PodGroup "may be created later"), so a request no pod follows changes nothing;
- at release (the leader's gang controller, room chosen and quota free): a `Workload` with one pod group
  template (`schedulingPolicy.gang.minCount` = the gang's size, `schedulingConstraints.topology` = the room's
  label key, which the API server keeps only where TopologyAwareWorkloadScheduling is on) and the `PodGroup`
  the members name, both owned by the members' owners (or the members themselves) so that garbage collection
  removes them with the gang. Then the pins and the gate removal follow as before, and kube-scheduler binds the
  whole gang or none of it.

Creating is idempotent (native_writer.py `NativeGangWriter.ensure`: 409 AlreadyExists is read back and kept
when it suits the gang), so a release finished by a new leader creates nothing twice. A PodGroup of the same
name that does not suit (a new run of the gang with another size) is deleted, with its uid as precondition,
and created again. A member that names a PodGroup of its own (its controller's, e.g. the Job controller's with
WorkloadWithJob) is left to it: KGWE creates only the PodGroup it named itself.
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from policies.vocabulary.keys import GANG
from policies.vocabulary.objects import ObjectView, PodView, mapping, objects
from webhook.cluster.model import ClusterModel
from webhook.wing_config import Gangs

log = logging.getLogger("kgwe.gangs.native")

GROUP = "scheduling.k8s.io"
VERSION = "v1alpha2"
GROUP_VERSION = f"{GROUP}/{VERSION}"
WORKLOADS = "workloads"
PODGROUPS = "podgroups"
KINDS = {WORKLOADS: "Workload", PODGROUPS: "PodGroup"}
TEMPLATE = "gang"  # the one pod group template of a gang's Workload
NAME_PREFIX = "kgwe-gang-"
MANAGED_BY = "app.kubernetes.io/managed-by"
# Owner references of one object: the distinct owners of a gang's members are few (a JobSet's Jobs); bare pods
# own it themselves, and garbage collection removes it once every owner is gone.
MAX_OWNERS = 64


def native_gangs(model: ClusterModel, settings: Gangs) -> bool:
    """Whether new gang members join a PodGroup: `gangs.workloadAPI` is not off and discovery found the API."""
    return settings.workload_api != "off" and model.serves(GROUP_VERSION, WORKLOADS, PODGROUPS)


def served(model: ClusterModel) -> bool:
    return model.serves(GROUP_VERSION, WORKLOADS, PODGROUPS)


def pod_group_name(gang: str) -> str:
    """The PodGroup (and Workload) of gang `gang` in its namespace: a DNS label from the gang's name alone, so
    every member computes it at its own admission. The hash keeps names apart that lowercasing would join."""
    digest = hashlib.sha256(gang.encode()).hexdigest()[:8]
    readable = re.sub(r"[^a-z0-9-]+", "-", gang.lower())[:40].strip("-")
    return f"{NAME_PREFIX}{readable}-{digest}" if readable else f"{NAME_PREFIX}{digest}"


def is_kgwe_name(name: str) -> bool:
    return name.startswith(NAME_PREFIX)


# -- the objects ----------------------------------------------------------------------------------------
def owner_references(members: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Who owns a gang's Workload and PodGroup: each member's controller (a Job, a StatefulSet), or the member
    itself when it has none; distinct, oldest member first, at most MAX_OWNERS."""
    refs: dict[str, dict[str, Any]] = {}
    for pod in sorted(members, key=lambda p: (PodView(p).creation_timestamp, PodView(p).name)):
        view = PodView(pod)
        owner = view.controller_owner
        if owner is not None and all(isinstance(owner.get(k), str) and owner.get(k)
                                     for k in ("apiVersion", "kind", "name", "uid")):
            ref = {k: str(owner[k]) for k in ("apiVersion", "kind", "name", "uid")}
        elif view.uid and view.name:
            ref = {"apiVersion": "v1", "kind": "Pod", "name": view.name, "uid": view.uid}
        else:
            continue
        refs.setdefault(ref["uid"], ref)
        if len(refs) >= MAX_OWNERS:
            break
    return list(refs.values())


def controller_ref(members: Iterable[Mapping[str, Any]]) -> dict[str, str] | None:
    """The Workload's `controllerRef` when every member has the same controller (one Job, one JobSet's ...)."""
    found: set[tuple[str, str, str]] = set()
    for pod in members:
        owner = PodView(pod).controller_owner
        if owner is None:
            return None
        found.add((str(owner.get("apiVersion") or ""), str(owner.get("kind") or ""), str(owner.get("name") or "")))
    if len(found) != 1:
        return None
    api_version, kind, name = found.pop()
    if not kind or not name:
        return None
    ref = {"kind": kind, "name": name}
    if "/" in api_version:
        ref = {"apiGroup": api_version.split("/", 1)[0], **ref}
    return ref


def _metadata(name: str, namespace: str, gang: str, owners: list[dict[str, Any]]) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "labels": {MANAGED_BY: "kgwe", GANG: gang}}
    if owners:
        meta["ownerReferences"] = owners
    return meta


def _policy(min_count: int, room_key: str) -> dict[str, Any]:
    return {"schedulingPolicy": {"gang": {"minCount": min_count}},
            "schedulingConstraints": {"topology": [{"key": room_key}]}}


def workload_object(namespace: str, gang: str, min_count: int, room_key: str,
                    members: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The gang's Workload: one pod group template, gang policy, the room's label as topology constraint."""
    spec: dict[str, Any] = {"podGroupTemplates": [{"name": TEMPLATE, **_policy(min_count, room_key)}]}
    ref = controller_ref(members)
    if ref is not None:
        spec = {"controllerRef": ref, **spec}
    return {"apiVersion": GROUP_VERSION, "kind": "Workload",
            "metadata": _metadata(pod_group_name(gang), namespace, gang, owner_references(members)), "spec": spec}


def pod_group_object(namespace: str, gang: str, min_count: int, room_key: str,
                     members: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The PodGroup the members name: the template's policy copied, as workload controllers do."""
    name = pod_group_name(gang)
    spec = {"podGroupTemplateRef": {"workload": {"workloadName": name, "podGroupTemplateName": TEMPLATE}},
            **_policy(min_count, room_key)}
    return {"apiVersion": GROUP_VERSION, "kind": "PodGroup",
            "metadata": _metadata(name, namespace, gang, owner_references(members)), "spec": spec}


def _min_count(policy: Any) -> Any:
    return mapping(mapping(policy).get("gang")).get("minCount")


def _keeps_topology(part: Mapping[str, Any], room_key: str) -> bool:
    """The topology constraint is the room's key, or absent (dropped where TopologyAwareWorkloadScheduling is off)."""
    topology = objects(mapping(part.get("schedulingConstraints")).get("topology"))
    return not topology or [t.get("key") for t in topology] == [room_key]


def workload_suits(current: Mapping[str, Any], min_count: int, room_key: str) -> bool:
    templates = objects(ObjectView(current).spec.get("podGroupTemplates"))
    return any(t.get("name") == TEMPLATE and _min_count(t.get("schedulingPolicy")) == min_count
               and _keeps_topology(t, room_key) for t in templates)


def pod_group_suits(current: Mapping[str, Any], min_count: int, room_key: str) -> bool:
    spec = ObjectView(current).spec
    ref = mapping(mapping(spec.get("podGroupTemplateRef")).get("workload"))
    return (_min_count(spec.get("schedulingPolicy")) == min_count and _keeps_topology(spec, room_key)
            and ref.get("workloadName") == ObjectView(current).name and ref.get("podGroupTemplateName") == TEMPLATE)
