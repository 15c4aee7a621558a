"""A ResourceClaim or ResourceClaimTemplate made again under a name that a waiting pod names: judged with
that pod, so refused.

A pod is admitted with what its claims ask at the moment it is created (webhook/dra/claimed.py; a claim or
template that does not exist yet refuses the pod). Neither kind can be changed, but either can be deleted
and created again under the same name, and a pod that waits for it gets the new one:

- a ResourceClaim the pod names directly (`resourceClaimName`): the scheduler allocates the new claim to a
  pod that is not running yet (unschedulable, gated);
- a ResourceClaimTemplate (`resourceClaimTemplateName`) deleted before Kubernetes' resource-claim
  controller made the pod's claim from it: the controller makes the claim when a template of that name
  appears again (kubernetes/kubernetes#135983), from the new one.

Either way the pod gets 8 H100s where it was charged, and RBAC-checked, for one GPU. So the validating
webhook also sees CREATEs of both kinds (the chart's `resourceclaims.validate.kgwe.io`, with
`webhooks.resourceClaimPods`) and refuses one that can give GPUs (`GpuClasses`) while an unfinished pod of
the namespace waits for it: names the claim, or names the template and has no claim made from it yet
(`status.resourceClaimStatuses`). The pod was admitted with what the name held then, and must be created
again to be judged with the new one. Claims the API server's controllers make for pods are never named by
a pod, so they always pass (the chart does not even send them); a claim or template for no GPU, or one no
waiting pod names, passes.
"""

from __future__ import annotations

from collections.abc import Iterator

from policies.vocabulary.objects import pod_view
from webhook.admission.outcome import Outcome
from webhook.admission.request import AdmissionRequest
from webhook.claim_names import generated_claim_names, object_name
from webhook.cluster.model import ClusterModel, pod_is_finished
from webhook.dra.claimed import most_devices_on_a_node, requested_gpus
from webhook.dra.gpu_classes import GpuClasses

GROUP = "resource.k8s.io"
KINDS = ("ResourceClaim", "ResourceClaimTemplate")
MAX_NAMED = 3  # waiting pods named in a refusal


def is_claim_create(request: AdmissionRequest) -> bool:
    """A CREATE of a ResourceClaim or ResourceClaimTemplate (any version of resource.k8s.io)."""
    return (
        request.kind.get("group") == GROUP
        and request.kind.get("kind") in KINDS
        and request.operation == "CREATE"
        and not request.sub_resource
    )


def waiting_pods(model: ClusterModel, namespace: str, kind: str, name: str) -> Iterator[str]:
    """`namespace/name` of the unfinished pods of `namespace` waiting for the ResourceClaim `name` (naming it
    directly) or the ResourceClaimTemplate `name` (naming it, with no claim made from it yet)."""
    prefix = f"{namespace}/"  # pods are held by `namespace/name`: other namespaces cost a string compare
    field = "resourceClaimName" if kind == "ResourceClaim" else "resourceClaimTemplateName"
    for key, pod in model.pods.items():
        if not key.startswith(prefix):
            continue
        view = pod_view(pod)
        entries = view.spec.get("resourceClaims")
        if view.namespace != namespace or not isinstance(entries, list) or pod_is_finished(pod):
            continue
        made = generated_claim_names(view) if kind == "ResourceClaimTemplate" else {}
        if any(
            isinstance(entry, dict) and entry.get(field) == name and entry.get("name") not in made
            for entry in entries
        ):
            yield f"{namespace}/{view.name}"


def judge_claim_create(request: AdmissionRequest, model: ClusterModel, audit: bool) -> Outcome:
    """The answer to a ResourceClaim or ResourceClaimTemplate CREATE (see the module docstring). In audit
    mode a refusal is a warning."""
    claim = request.object or {}
    metadata = claim.get("metadata")
    name = object_name(request.name or (metadata.get("name") if isinstance(metadata, dict) else None))
    if name is None:
        return Outcome(object=request.object)  # generateName: no pod can have named it yet
    kind = request.kind.get("kind", "")
    what = f"{kind} {request.namespace}/{name}"
    spec = claim.get("spec")
    if kind == "ResourceClaimTemplate":  # the claims' spec is the template's spec.spec
        spec = spec.get("spec") if isinstance(spec, dict) else None
    asked = requested_gpus([(what, spec)], GpuClasses(model.device_classes), most_devices_on_a_node(model))
    if not asked.devices and not asked.problems:
        return Outcome(object=request.object)
    pods = list(waiting_pods(model, request.namespace, kind, name))
    if not pods:
        return Outcome(object=request.object)
    more = f" and {len(pods) - MAX_NAMED} more" if len(pods) > MAX_NAMED else ""
    named = ", ".join(sorted(pods)[:MAX_NAMED]) + more
    message = (
        f"{what} can give GPUs, and pod {named} waits for it: a pod is admitted with what its claims ask "
        "when it is created, and would get these GPUs unjudged; delete the pod and create the pod again "
        "after this object"
    )
    if audit:
        return Outcome(warnings=[f"KGWE audit mode: would deny: {message}"],
                       audit_annotations={"would-deny": message[:1024]}, object=request.object)
    denial = Outcome.deny(message)
    denial.object = request.object
    return denial
