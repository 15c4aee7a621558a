"""What the cluster model keeps of the objects the API sends: pods slimmed, other kinds nearly whole.

Pods are slimmed to what KGWE reads, because pods dominate a cluster's objects (`slim_pod`):
metadata name, namespace, uid, labels, annotations, ownerReferences, resourceVersion, creationTimestamp,
deletionTimestamp (a terminating pod is no gang member);
spec nodeName, schedulerName, affinity, nodeSelector, tolerations, schedulingGates, schedulingGroup (the PodGroup
of native gang scheduling a gang member joins), resourceClaims (DRA: what the pod's claims hold is charged), and
containers / initContainers reduced to name and resources (plus an init container's restartPolicy, which makes it
a sidecar);
status phase, startTime, each ended container's `finishedAt` (a pod's cost is its lifetime), the claims the API
server made for it (`resourceClaimStatuses`, `extendedResourceClaimStatus`), KGWE's own conditions
(`kgwe.io/...`) and the scheduler's `PodScheduled` (type, status, reason, message bounded: "what blocks it now"
quotes it, docs/explain.md). Everything else (images, env, volumes, other conditions, the rest of container
statuses) is dropped.
Other kinds are kept whole except `metadata.managedFields` and a node's `status.images` (`slim_object`).
"""

from __future__ import annotations

from typing import Any

from policies.vocabulary.objects import ContainerView, ObjectView, PodView
from webhook.cluster.shared_parts import SHARED, text

POD_METADATA_FIELDS = (
    "name", "namespace", "uid", "labels", "annotations", "ownerReferences", "resourceVersion", "creationTimestamp",
    "deletionTimestamp",
)
POD_SPEC_FIELDS = (
    "nodeName", "schedulerName", "affinity", "nodeSelector", "tolerations", "schedulingGates", "schedulingGroup",
    "resourceClaims",
)
POD_STATUS_CLAIM_FIELDS = ("resourceClaimStatuses", "extendedResourceClaimStatus")
# The parts replicas and a node's pods have equal, held once across pods (shared_parts.py).
SHARED_METADATA = ("labels", "annotations", "ownerReferences")
SHARED_SPEC = ("affinity", "nodeSelector", "tolerations", "schedulingGates", "resourceClaims", "containers",
               "initContainers")
SHARED_TEXT_METADATA = ("namespace", "creationTimestamp")
SHARED_TEXT_SPEC = ("nodeName", "schedulerName")
MAX_CONDITION_MESSAGE = 1024  # the scheduler's "0/N nodes are available: ..." names each reason once, with counts


def _slim_container(container: ContainerView, init: bool) -> dict[str, Any]:
    raw = container.raw
    out = {"name": raw.get("name"), "resources": raw.get("resources") or {}}
    if init and raw.get("restartPolicy"):
        out["restartPolicy"] = raw["restartPolicy"]
    return out


def slim_pod(pod: dict[str, Any]) -> dict[str, Any]:
    """The parts of a pod KGWE reads (see the module docstring); the rest is dropped to save memory."""
    view = PodView(pod)
    meta, spec = view.metadata, view.spec
    slim_spec: dict[str, Any] = {k: spec[k] for k in POD_SPEC_FIELDS if k in spec}
    for key, init in (("containers", False), ("initContainers", True)):
        containers = view.init_containers if init else view.containers
        if containers:
            slim_spec[key] = [_slim_container(c, init) for c in containers]
    out: dict[str, Any] = {
        "apiVersion": view.api_version or "v1",
        "kind": "Pod",
        "metadata": {k: meta[k] for k in POD_METADATA_FIELDS if k in meta},
        "spec": slim_spec,
    }
    phase = view.phase
    if phase:
        out["status"] = {"phase": phase}
    # When it started and, once finished, when its containers ended: a pod's cost is its lifetime (docs/costs.md).
    lifetime = pod_lifetime_status(pod)
    if lifetime:
        out.setdefault("status", {}).update(lifetime)
    status = pod.get("status")
    if isinstance(status, dict):
        claims = {k: status[k] for k in POD_STATUS_CLAIM_FIELDS if k in status}
        if claims:
            out.setdefault("status", {}).update(claims)
    conditions = status.get("conditions") if isinstance(status, dict) else None
    if isinstance(conditions, list):
        kept = _kept_conditions(conditions)
        if kept:
            out.setdefault("status", {})["conditions"] = kept
    return shared(out)


def shared(slim: dict[str, Any]) -> dict[str, Any]:
    """`slim` (a pod `slim_pod` built: its own top-level dicts) with its parts equal to other pods' held once."""
    slim["apiVersion"] = text(slim["apiVersion"])
    for part, texts, parts in ((slim["metadata"], SHARED_TEXT_METADATA, SHARED_METADATA),
                               (slim["spec"], SHARED_TEXT_SPEC, SHARED_SPEC)):
        for key in texts:
            if key in part:
                part[key] = text(part[key])
        for key in parts:
            if key in part:
                part[key] = SHARED.part(key, part[key])
    if "status" in slim:
        slim["status"] = SHARED.part("status", slim["status"])
    return slim


def _kept_conditions(conditions: list[Any]) -> list[dict[str, Any]]:
    """KGWE's own conditions (the quota controller's `kgwe.io/QuotaAvailable`, written only when it changes)
    whole, and the scheduler's PodScheduled cut to what "what blocks it now" says (its message bounded)."""
    kept: list[dict[str, Any]] = []
    for condition in conditions:
        if not isinstance(condition, dict):
            continue
        kind = str(condition.get("type") or "")
        if kind.startswith("kgwe.io/"):
            kept.append(condition)
        elif kind == "PodScheduled":
            small = {k: condition[k] for k in ("type", "status", "reason", "message") if k in condition}
            if isinstance(small.get("message"), str):
                small["message"] = small["message"][:MAX_CONDITION_MESSAGE]
            kept.append(small)
    return kept


def pod_lifetime_status(pod: dict[str, Any]) -> dict[str, Any]:
    """`status.startTime` and, per container that ended, only `state.terminated.finishedAt`."""
    status = pod.get("status")
    if not isinstance(status, dict):
        return {}
    out: dict[str, Any] = {}
    if isinstance(status.get("startTime"), str):
        out["startTime"] = status["startTime"]
    ended = []
    for item in status.get("containerStatuses") or []:
        state = item.get("state") if isinstance(item, dict) else None
        terminated = state.get("terminated") if isinstance(state, dict) else None
        if isinstance(terminated, dict) and isinstance(terminated.get("finishedAt"), str):
            ended.append({"name": item.get("name"), "state": {"terminated": {"finishedAt": terminated["finishedAt"]}}})
    if ended:
        out["containerStatuses"] = ended
    return out


def slim_object(obj: dict[str, Any]) -> dict[str, Any]:
    """Any other kind without what KGWE never reads and what is large: managedFields, a node's image list."""
    meta = ObjectView(obj).metadata
    status = obj.get("status")
    if "managedFields" not in meta and not (isinstance(status, dict) and "images" in status):
        return obj
    out = {**obj, "metadata": {k: v for k, v in meta.items() if k != "managedFields"}}
    if isinstance(status, dict) and "images" in status:
        out["status"] = {k: v for k, v in status.items() if k != "images"}
    return out
