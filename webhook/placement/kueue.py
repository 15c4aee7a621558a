"""Kueue's keys on a pod, as placement reads and writes them: the queue a pod is queued in, and the
topology request that keeps a gang's pods in one domain (written instead of KGWE's own gang gate)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from policies.vocabulary.objects import PodView, pod_view

KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
KUEUE_REQUIRED_TOPOLOGY = "kueue.x-k8s.io/podset-required-topology"


def queued_by_kueue(pod: PodView | Mapping[str, Any]) -> bool:
    """Whether Kueue queues the pod (its queue-name label, or the annotation older Kueue read)."""
    view = pod_view(pod)
    return view.label(KUEUE_QUEUE_LABEL) is not None or view.annotation(KUEUE_QUEUE_LABEL) is not None
