"""Gang names and the bounded reading of a pod's gang membership (the size itself is read by the core's
intent, webhook/intent.py `parse_gang_size`).

Everything here reads what a pod creator wrote, so every value is bounded before it is used: the
gang size is a decimal integer between 1 and `MAX_GANG_SIZE`, the gang name a label value.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from policies.vocabulary import keys
from policies.vocabulary.objects import PodView
from webhook.intent import parse_gang_size

A_GANG = keys.GANG
A_GANG_SIZE = keys.GANG_SIZE
LABEL_GANG = keys.GANG
GATE = keys.GANG
HOSTNAME_LABEL = "kubernetes.io/hostname"


@dataclass(frozen=True)
class Membership:
    """A pod's place in a gang, as read from the pod KGWE admitted (label and size annotation)."""

    namespace: str
    gang: str
    size: int

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.gang}"


def membership(pod: dict[str, Any]) -> Membership | None:
    """The gang a pod belongs to, or None (no gang label, no valid size: a v1 gang or no gang)."""
    view = PodView(pod)
    gang = view.label(LABEL_GANG)
    raw = view.annotation(A_GANG_SIZE)
    if not gang or raw is None:
        return None
    size, _problem = parse_gang_size(raw)
    if size is None:
        return None
    return Membership(view.namespace, gang, size)


def is_gated(pod: dict[str, Any]) -> bool:
    """The pod still carries KGWE's scheduling gate."""
    return GATE in PodView(pod).scheduling_gates


def is_bound(pod: dict[str, Any]) -> bool:
    return bool(PodView(pod).node_name)


def is_terminating(pod: dict[str, Any]) -> bool:
    """Deletion was asked (`metadata.deletionTimestamp`): the pod is going away, whatever runs in it still.
    Only the API server sets the field, and it is never cleared, so a pod creator cannot fake the way back."""
    return PodView(pod).deleting


def created(pod: dict[str, Any]) -> datetime | None:
    """The pod's `metadata.creationTimestamp` (set by the API server, whole seconds); None when absent or unreadable
    (pods of a YAML cluster directory may lack it)."""
    return parse_timestamp(PodView(pod).creation_timestamp)


def parse_timestamp(text: str | None) -> datetime | None:
    """An RFC 3339 time as the API server writes it; None for anything else."""
    if not text or len(text) > 64:
        return None
    try:
        stamp = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return stamp if stamp.tzinfo is not None else None
