"""The Workload API of Kubernetes 1.36 (`scheduling.k8s.io/v1alpha2`, KEP-4671/5832) as kube-apiserver serves it,
for the fake API server (kube_fake_apiserver.py, `FakeApiServer(workload_api=True)`).

Written from the v1.36.2 types (k8s.io/api scheduling/v1alpha2/types.go, core/v1 PodSpec.SchedulingGroup) and the
registry's behaviour (pkg/registry/scheduling/workload strategy and its tests):

- served only with the GenericWorkload gate on; discovery then lists `workloads`, `podgroups` and
  `podgroups/status`; with the gate off the group version is not found (404) and a pod's
  `spec.schedulingGroup` is dropped at create, as a disabled field is (PrepareForCreate);
- fields of gates that are off are dropped at create: `schedulingConstraints` (TopologyAwareWorkloadScheduling),
  `disruptionMode`, `priorityClassName`, `priority` (WorkloadAwarePreemption), `resourceClaims`
  (DRAWorkloadResourceClaims);
- validation (422 Invalid): a DNS subdomain name; `podGroupTemplates` required, at most 8, unique DNS-label names;
  exactly one of `basic` and `gang`; `gang.minCount` at least 1; `topology` at most 1 item with a label key;
  a PodGroup's `podGroupTemplateRef.workload` names both the Workload and the template; a pod's
  `schedulingGroup.podGroupName` a DNS subdomain;
- immutability on update: a Workload's `controllerRef` and `podGroupTemplates`, a PodGroup's whole spec, a pod's
  `schedulingGroup`;
- objects read back as the Go types serialize them: fields without `omitempty` come back as `null`
  (`podGroupTemplates[].schedulingConstraints`, `spec.podGroupTemplateRef`), a PodGroup carries `status: {}`,
  both `metadata.uid`, `creationTimestamp` and `generation: 1`.
"""

from __future__ import annotations

import copy
import re
import uuid
from datetime import UTC, datetime
from typing import Any

GROUP_VERSION = "scheduling.k8s.io/v1alpha2"
PREFIX = f"/apis/{GROUP_VERSION}"
RESOURCES: dict[str, tuple[str, str, bool]] = {
    f"{PREFIX}/workloads": ("Workload", GROUP_VERSION, True),
    f"{PREFIX}/podgroups": ("PodGroup", GROUP_VERSION, True),
}
VERBS = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]
DISCOVERY = [
    {"name": "podgroups", "singularName": "podgroup", "namespaced": True, "kind": "PodGroup", "verbs": VERBS,
     "storageVersionHash": "PodGroupFake="},
    {"name": "podgroups/status", "singularName": "", "namespaced": True, "kind": "PodGroup",
     "verbs": ["get", "patch", "update"]},
    {"name": "workloads", "singularName": "workload", "namespaced": True, "kind": "Workload", "verbs": VERBS,
     "storageVersionHash": "WorkloadFake="},
]
MAX_TEMPLATES = 8
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
LABEL_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
PREEMPTION_FIELDS = ("disruptionMode", "priorityClassName", "priority")


def _dns_subdomain(value: Any) -> bool:
    return isinstance(value, str) and 0 < len(value) <= 253 and bool(DNS_SUBDOMAIN.match(value))


def _dns_label(value: Any) -> bool:
    return isinstance(value, str) and 0 < len(value) <= 63 and bool(DNS_LABEL.match(value))


def _label_key(value: Any) -> bool:
    if not isinstance(value, str) or not value:
        return False
    prefix, _, name = value.rpartition("/")
    if prefix and not _dns_subdomain(prefix):
        return False
    return len(name) <= 63 and bool(LABEL_NAME.match(name))


def _policy_problems(policy: Any, path: str) -> list[str]:
    if not isinstance(policy, dict):
        return [f"{path}: Required value"]
    set_ = [k for k in ("basic", "gang") if policy.get(k) is not None]
    if len(set_) != 1:
        return [f"{path}: Invalid value: must specify exactly one of: `basic`, `gang`"]
    if set_ == ["gang"]:
        count = (policy["gang"] or {}).get("minCount") if isinstance(policy["gang"], dict) else None
        if not isinstance(count, int) or isinstance(count, bool):
            return [f"{path}.gang.minCount: Required value"]
        if count < 1:
            return [f"{path}.gang.minCount: Invalid value: {count}: must be greater than or equal to 1"]
    return []


def _constraint_problems(constraints: Any, path: str) -> list[str]:
    if constraints is None:
        return []
    topology = (constraints or {}).get("topology") if isinstance(constraints, dict) else None
    if topology is None:
        return []
    if not isinstance(topology, list):
        return [f"{path}.topology: Invalid value: must be a list"]
    if len(topology) > 1:
        return [f"{path}.topology: Too many: {len(topology)}: must have at most 1 item"]
    problems = []
    for index, item in enumerate(topology):
        key = item.get("key") if isinstance(item, dict) else None
        if not key:
            problems.append(f"{path}.topology[{index}].key: Required value")
        elif not _label_key(key):
            problems.append(f"{path}.topology[{index}].key: Invalid value: {key!r}: must be a label key")
    return problems


def _drop_disabled(part: dict[str, Any], topology_aware: bool) -> None:
    """PrepareForCreate: fields of gates that are off are dropped (WorkloadAwarePreemption and
    DRAWorkloadResourceClaims are off in every test; TopologyAwareWorkloadScheduling as the server says)."""
    if not topology_aware:
        part.pop("schedulingConstraints", None)
    for name in (*PREEMPTION_FIELDS, "resourceClaims"):
        part.pop(name, None)


def workload_problems(obj: dict[str, Any]) -> list[str]:
    problems = []
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return ["spec: Required value"]
    ref = spec.get("controllerRef")
    if ref is not None and (not isinstance(ref, dict) or not ref.get("kind") or not ref.get("name")):
        problems.append("spec.controllerRef: Invalid value: kind and name are required")
    templates = spec.get("podGroupTemplates")
    if not isinstance(templates, list) or not templates:
        return [*problems, "spec.podGroupTemplates: Required value"]
    if len(templates) > MAX_TEMPLATES:
        problems.append(f"spec.podGroupTemplates: Too many: {len(templates)}: must have at most {MAX_TEMPLATES} items")
    seen: set[str] = set()
    for index, template in enumerate(templates):
        path = f"spec.podGroupTemplates[{index}]"
        if not isinstance(template, dict):
            problems.append(f"{path}: Invalid value: must be an object")
            continue
        name = template.get("name")
        if not _dns_label(name):
            problems.append(f"{path}.name: Invalid value: {name!r}: must be a DNS label")
        elif name in seen:
            problems.append(f"{path}.name: Duplicate value: {name!r}")
        else:
            seen.add(name)
        problems.extend(_policy_problems(template.get("schedulingPolicy"), f"{path}.schedulingPolicy"))
        problems.extend(_constraint_problems(template.get("schedulingConstraints"), f"{path}.schedulingConstraints"))
    return problems


def pod_group_problems(obj: dict[str, Any]) -> list[str]:
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return ["spec: Required value"]
    problems = _policy_problems(spec.get("schedulingPolicy"), "spec.schedulingPolicy")
    problems.extend(_constraint_problems(spec.get("schedulingConstraints"), "spec.schedulingConstraints"))
    ref = spec.get("podGroupTemplateRef")
    if ref is not None:
        workload = ref.get("workload") if isinstance(ref, dict) else None
        if not isinstance(workload, dict):
            problems.append("spec.podGroupTemplateRef: Invalid value: must specify exactly one of: `workload`")
        else:
            if not _dns_subdomain(workload.get("workloadName")):
                problems.append("spec.podGroupTemplateRef.workload.workloadName: Required value")
            if not _dns_label(workload.get("podGroupTemplateName")):
                problems.append("spec.podGroupTemplateRef.workload.podGroupTemplateName: Required value")
    return problems


def prepare_create(kind: str, body: dict[str, Any], *, topology_aware: bool) -> tuple[dict[str, Any] | None, str]:
    """(the object as it is stored, "") or (None, the 422 message) for a create of a Workload or a PodGroup."""
    obj = copy.deepcopy(body)
    meta = obj.setdefault("metadata", {})
    name = meta.get("name")
    spec = obj.get("spec")
    if isinstance(spec, dict):
        parts = spec.get("podGroupTemplates") if kind == "Workload" else [spec]
        for part in parts if isinstance(parts, list) else []:
            if isinstance(part, dict):
                _drop_disabled(part, topology_aware)
    problems = [] if _dns_subdomain(name) else [f"metadata.name: Invalid value: {name!r}: a DNS subdomain"]
    problems += workload_problems(obj) if kind == "Workload" else pod_group_problems(obj)
    if problems:
        return None, f'{kind}.scheduling.k8s.io "{name}" is invalid: ' + ", ".join(problems)
    meta["uid"] = str(uuid.uuid4())
    meta["creationTimestamp"] = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    meta["generation"] = 1
    obj["apiVersion"], obj["kind"] = GROUP_VERSION, kind
    return serialized(kind, obj), ""


def serialized(kind: str, obj: dict[str, Any]) -> dict[str, Any]:
    """As the Go types serialize: fields without omitempty are null when unset; a PodGroup's status is {}."""
    spec = obj["spec"]
    if kind == "Workload":
        spec["podGroupTemplates"] = [{"name": t.get("name"), "schedulingPolicy": t.get("schedulingPolicy"),
                                      "schedulingConstraints": t.get("schedulingConstraints"),
                                      **{k: v for k, v in t.items() if k not in (
                                          "name", "schedulingPolicy", "schedulingConstraints")}}
                                     for t in spec["podGroupTemplates"]]
    else:
        spec.setdefault("podGroupTemplateRef", None)
        obj.setdefault("status", {})
    return obj


def update_problem(kind: str, old: dict[str, Any], new: dict[str, Any]) -> str | None:
    """What ValidateWorkloadUpdate / ValidatePodGroupUpdate refuse: the immutable parts of the spec changed."""
    old_spec, new_spec = old.get("spec") or {}, new.get("spec") or {}
    fields = ("controllerRef", "podGroupTemplates") if kind == "Workload" else tuple({*old_spec, *new_spec})
    for name in fields:
        if old_spec.get(name) != new_spec.get(name):
            return f"spec.{name}: Invalid value: field is immutable"
    for name in ("uid", "name", "namespace", "creationTimestamp"):
        if (old.get("metadata") or {}).get(name) != (new.get("metadata") or {}).get(name):
            return f"metadata.{name}: Invalid value: field is immutable"
    return None


def pod_create(pod: dict[str, Any], *, served: bool) -> dict[str, Any]:
    """A pod as stored at create: `spec.schedulingGroup` dropped where GenericWorkload is off, else validated."""
    spec = pod.get("spec")
    if not isinstance(spec, dict) or "schedulingGroup" not in spec:
        return pod
    if not served:
        pod = copy.deepcopy(pod)
        del pod["spec"]["schedulingGroup"]
        return pod
    group = spec["schedulingGroup"]
    name = group.get("podGroupName") if isinstance(group, dict) else None
    if not _dns_subdomain(name):
        raise ValueError(f"spec.schedulingGroup.podGroupName: Invalid value: {name!r}: must be a DNS subdomain")
    return pod
