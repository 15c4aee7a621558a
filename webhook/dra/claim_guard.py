"""A ResourceClaim made again under a name that a waiting pod names: judged with that pod, so refused.

A pod that names a ResourceClaim directly (`spec.resourceClaims[].resourceClaimName`) is admitted with what
that claim asked at the moment (webhook/dra/claimed.py; a claim that does not exist yet refuses the pod).
Claims cannot be changed, but they can be deleted and created again under the same name, and a pod that
is not running yet (unschedulable, gated) then gets the new one from the scheduler: 8 H100s where it was
charged, and RBAC-checked, for one GPU. So the validating webhook also sees ResourceClaim CREATEs (the
chart's `resourceclaims.validate.kgwe.io`, with `webhooks.resourceClaimPods`), and refuses one that can
give GPUs (`GpuClasses`) while an unfinished pod of the namespace already names it: the pod was admitted
with the claim it named then, and must be created again to be judged with the new one.

Claims the API server's controllers make for pods (from a template, or the scheduler's claim for DRA
extended resources) are never named by `resourceClaimName`, so they always pass; the chart keeps them
from reaching the webhook at all. A claim for no GPU, or one no waiting pod names, passes.
"""

from __future__ import annotations

from collections.abc import Iterator

from policies.vocabulary.objects import pod_view
from webhook.admission.outcome import Outcome
from webhook.admission.request import AdmissionRequest
from webhook.cluster.model import ClusterModel, pod_is_finished
from webhook.dra.claimed import GpuClasses, most_devices_on_a_node, object_name, requested_gpus

GROUP = "resource.k8s.io"
KIND = "ResourceClaim"
MAX_NAMED = 3  # waiting pods named in a refusal


def is_claim_create(request: AdmissionRequest) -> bool:
    """A CREATE of a ResourceClaim (any version of resource.k8s.io)."""
    return (
        request.kind.get("group") == GROUP
        and request.kind.get("kind") == KIND
        and request.operation == "CREATE"
        and not request.sub_resource
    )


def waiting_pods(model: ClusterModel, namespace: str, claim: str) -> Iterator[str]:
    """`namespace/name` of the unfinished pods of `namespace` that name ResourceClaim `claim` directly."""
    for pod in model.pods.values():
        view = pod_view(pod)
        if view.namespace != namespace or pod_is_finished(pod):
            continue
        entries = view.spec.get("resourceClaims")
        if isinstance(entries, list) and any(
            isinstance(entry, dict) and entry.get("resourceClaimName") == claim for entry in entries
        ):
            yield f"{namespace}/{view.name}"


def judge_claim_create(request: AdmissionRequest, model: ClusterModel, audit: bool) -> Outcome:
    """The answer to a ResourceClaim CREATE (see the module docstring). In audit mode a refusal is a
    warning."""
    claim = request.object or {}
    metadata = claim.get("metadata")
    name = object_name(request.name or (metadata.get("name") if isinstance(metadata, dict) else None))
    if name is None:
        return Outcome(object=request.object)  # generateName: no pod can have named it yet
    what = f"ResourceClaim {request.namespace}/{name}"
    asked = requested_gpus([(what, claim.get("spec"))], GpuClasses(model.device_classes), most_devices_on_a_node(model))
    if not asked.devices and not asked.problems:
        return Outcome(object=request.object)
    pods = list(waiting_pods(model, request.namespace, name))
    if not pods:
        return Outcome(object=request.object)
    more = f" and {len(pods) - MAX_NAMED} more" if len(pods) > MAX_NAMED else ""
    named = ", ".join(sorted(pods)[:MAX_NAMED]) + more
    message = (
        f"{what} can give GPUs, and pod {named} already names it: a pod is admitted with what its claims ask "
        "when it is created, and would get this claim's GPUs unjudged; delete the pod and create the pod "
        "again after the claim"
    )
    if audit:
        return Outcome(warnings=[f"KGWE audit mode: would deny: {message}"],
                       audit_annotations={"would-deny": message[:1024]}, object=request.object)
    denial = Outcome.deny(message)
    denial.object = request.object
    return denial
