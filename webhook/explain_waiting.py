"""What the cluster itself says keeps a pod waiting, for "what blocks it now" (webhook/explain.py):

- the scheduler's own reason: the pod's `PodScheduled` condition when it is False (`Unschedulable: 0/12 nodes
  are available: ...`), which sees what KGWE's model does not (CPU, memory, volumes, pod affinity); not the
  `SchedulingGated` it carries while gated (the gates are said on their own, each with why);
- Dynamic Resource Allocation: each of the pod's claims that is not created or not allocated yet, since the
  scheduler binds a pod only once every claim of it is allocated.

Both read the pod as the cluster model keeps it (webhook/cluster/slimming.py keeps these fields), and every
string is bounded: a condition message is written by whoever patches the pod's status.
"""

from __future__ import annotations

from typing import Any

from policies.vocabulary.objects import pod_view
from webhook.claim_names import MAX_POD_CLAIMS, generated_claim_names, object_name
from webhook.cluster.model import ClusterModel

# The reason Kubernetes gives a pod created with scheduling gates (KEP-3521); the gates themselves say more.
GATED = "SchedulingGated"
MAX_MESSAGE = 512  # the scheduler's messages name every reason once with a count; longer is someone else's text


def _bounded(text: Any, limit: int = MAX_MESSAGE) -> str:
    flat = " ".join(str(text or "").split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def scheduler_reason(pod: dict[str, Any]) -> str | None:
    """The scheduler's word on why it has not bound the pod, or None when it has said nothing (yet)."""
    status = pod.get("status")
    conditions = status.get("conditions") if isinstance(status, dict) else None
    for condition in conditions if isinstance(conditions, list) else []:
        if not isinstance(condition, dict) or condition.get("type") != "PodScheduled":
            continue
        if condition.get("status") != "False":
            return None
        if condition.get("reason") == GATED and pod_view(pod).scheduling_gates:
            return None  # "blocked due to non-empty scheduling gates": each gate is said already, with why
        reason = _bounded(condition.get("reason"), 64) or "not scheduled"
        message = _bounded(condition.get("message"))
        return f"the scheduler says ({reason}): {message}" if message else f"the scheduler says: {reason}"
    return None


def _allocated(claim: dict[str, Any]) -> bool:
    status = claim.get("status")
    return isinstance(status, dict) and isinstance(status.get("allocation"), dict)


def unallocated_claims(pod: dict[str, Any], model: ClusterModel) -> list[str]:
    """One line per claim of the pod that is not allocated yet (the scheduler binds the pod only after)."""
    view = pod_view(pod)
    namespace = view.namespace
    generated = generated_claim_names(view)
    lines: list[str] = []
    for entry in view.resource_claims[:MAX_POD_CLAIMS]:
        name = object_name(entry.get("name"))
        if name is None:
            continue
        template = object_name(entry.get("resourceClaimTemplateName"))
        claim_name = object_name(entry.get("resourceClaimName")) or generated.get(name)
        if claim_name is None:
            made_from = f" from ResourceClaimTemplate {template}" if template else ""
            lines.append(f"DRA claim {name!r}: its ResourceClaim{made_from} is not created yet")
            continue
        claim = model.resource_claims.get(f"{namespace}/{claim_name}")
        if claim is None:
            lines.append(f"DRA claim {name!r}: ResourceClaim {namespace}/{claim_name} does not exist (yet)")
        elif not _allocated(claim):
            lines.append(f"DRA claim {name!r}: ResourceClaim {namespace}/{claim_name} is not allocated yet "
                         "(the scheduler allocates its devices when it finds a node for the pod; docs/dra.md)")
    return lines
