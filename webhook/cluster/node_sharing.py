"""Whether a node's GPUs are shared (MPS or time-slicing), and by how many pods each.

Sources, later ones winning: GFD's sharing-strategy and replicas labels (and the device plugin's
`nvidia.com/mps.capable`), GKE's sharing labels, the agent's fresh topology document. Anything but
MPS or time-slicing is `none` with one replica.
"""

from __future__ import annotations

from policies.vocabulary import keys
from webhook.cluster.node_reading import NodeReading, int_label


def sharing(reading: NodeReading) -> None:
    """The sharing step: the sharing mode and replicas per GPU."""
    labels, fresh = reading.labels, reading.fresh
    mode = labels.get(keys.NVIDIA_GPU_SHARING_STRATEGY, "none")
    replicas = int_label(labels.get(keys.NVIDIA_GPU_REPLICAS)) or 1
    if mode == "none" and labels.get("nvidia.com/mps.capable", "").lower() == "true":
        mode = "mps"
    gke_sharing = labels.get(keys.GKE_GPU_SHARING_STRATEGY)
    if gke_sharing:
        mode = "mps" if gke_sharing.lower() == "mps" else "time-slicing"
        replicas = int_label(labels.get(keys.GKE_MAX_SHARED_CLIENTS)) or replicas
    if fresh is not None and fresh.sharing.strategy != "none":
        mode, replicas = fresh.sharing.strategy, max(1, fresh.sharing.replicas)
    if mode not in ("mps", "time-slicing"):
        mode, replicas = "none", 1
    reading.sharing, reading.replicas = mode, replicas
