"""The names of a pod's DRA claims: what a valid claim or template name is (names are put into API paths,
so nothing else passes), and the ResourceClaims the API server and the scheduler made for a pod."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from policies.vocabulary.objects import PodView, pod_view

MAX_POD_CLAIMS = 32  # PodSpec.resourceClaims
MAX_NAME = 253

# An object name (DNS subdomain): what a claim or template may be called. The names are put into API
# paths, so nothing else ever passes.
_NAME = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def object_name(value: Any) -> str | None:
    """`value` when it is a valid object name, else None."""
    return value if isinstance(value, str) and len(value) <= MAX_NAME and _NAME.fullmatch(value) else None


def extended_claim_name(pod: PodView | Mapping[str, Any]) -> str | None:
    """The ResourceClaim the scheduler made for the pod's DRA extended resources
    (`status.extendedResourceClaimStatus.resourceClaimName`), once it has."""
    status = pod_view(pod).raw.get("status")
    extended = status.get("extendedResourceClaimStatus") if isinstance(status, dict) else None
    return object_name(extended.get("resourceClaimName")) if isinstance(extended, dict) else None


def generated_claim_names(pod: PodView | Mapping[str, Any]) -> dict[str, str]:
    """Pod claim name -> the ResourceClaim the API server made for it from a template
    (`status.resourceClaimStatuses`)."""
    status = pod_view(pod).raw.get("status")
    entries = status.get("resourceClaimStatuses") if isinstance(status, dict) else None
    if not isinstance(entries, list):
        return {}
    out: dict[str, str] = {}
    for entry in entries[:MAX_POD_CLAIMS]:
        if isinstance(entry, dict):
            name, claim = object_name(entry.get("name")), object_name(entry.get("resourceClaimName"))
            if name and claim:
                out[name] = claim
    return out
