"""Free device-plugin MIG slices per node and profile: the node's allocatable minus what its bound pods
ask for. Only read to choose among fitting profiles (webhook/placement/mig.py): the scheduler still
decides where the pod runs, so an estimate that is a pod or two stale costs a wait, never a wrong node.

A mixed-strategy node counts `nvidia.com/mig-<profile>`; a single-strategy or GKE node exposes its one
profile as `nvidia.com/gpu`, so there a bound pod's whole GPUs are slices of that profile.
"""

from __future__ import annotations

from decimal import Decimal

from policies.gpu_demand import pod_gpu_demand
from policies.vocabulary import resources
from policies.vocabulary.objects import PodView
from webhook.cluster.model import ClusterModel
from webhook.cluster.node_facts import NodeFacts

_DERIVED = "webhook.placement.mig_free"

FreeSlices = dict[str, dict[str, int]]  # node -> profile -> free slices


def free_slices(model: ClusterModel) -> FreeSlices:
    """Free slices of every MIG node of the snapshot, computed once per snapshot (a walk over its pods
    would otherwise run on every MIG admission)."""
    known: FreeSlices | None = model.derived.get(_DERIVED)
    if known is None:
        known = _compute(model)
        model.derived[_DERIVED] = known
    return known


def _resource(facts: NodeFacts, profile: str) -> str:
    if facts.mig_strategy in ("single", "gke"):
        return resources.NVIDIA_GPU
    return resources.NVIDIA_MIG_PREFIX + profile


def _compute(model: ClusterModel) -> FreeSlices:
    used: dict[str, dict[str, int]] = {}
    for raw in model.pods.values():
        pod = PodView(raw)
        facts = model.nodes.get(pod.node_name) if pod.node_name else None
        if facts is None or not facts.mig_profiles or pod.terminal:
            continue
        demand = pod_gpu_demand(pod)
        on_node = used.setdefault(facts.name, {})
        if facts.mig_strategy in ("single", "gke"):
            # One profile per node here: its whole GPUs are that profile's slices.
            for profile in facts.mig_profiles:
                on_node[profile] = on_node.get(profile, 0) + demand.whole_gpus
            continue
        for profile, count in demand.mig.items():
            on_node[profile] = on_node.get(profile, 0) + count
    free: FreeSlices = {}
    for name, facts in model.nodes.items():
        if not facts.mig_profiles:
            continue
        taken = used.get(name, {})
        free[name] = {}
        for profile, count in facts.mig_profiles.items():
            allocatable = int(facts.allocatable.get(_resource(facts, profile), Decimal(count)))
            free[name][profile] = max(0, allocatable - taken.get(profile, 0))
    return free


def has_free(model: ClusterModel, nodes: list[str], profile: str, slices: int) -> bool:
    """Whether one of `nodes`, settled by the MIG manager, has `slices` free slices of `profile` now."""
    free = free_slices(model)
    return any(
        model.nodes[n].mig_ready and free.get(n, {}).get(profile, 0) >= slices for n in nodes if n in model.nodes
    )
