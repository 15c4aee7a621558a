"""The GPUs free on each schedulable node of a snapshot: the node's GPUs less those its unfinished bound pods hold.

Gangs (rooms and their promises) and the quota queue (`has_capacity`) ask it once per snapshot. Counted from every
pod's GPU demand it was 0.35-0.45 CPU-s per new snapshot at 3,000 nodes, paid by the quota controller's pass, by the
`/validate` of a quota tenant's pod whenever its quota has room, and by the gang controller. Here the GPUs held per
node are kept, and moved by the pods that differ from the last snapshot asked (webhook/cluster/pod_changes.py, object
by object): the answer equals a count over every pod for any snapshot, older or newer
(tests/quotas/test_incremental_picture.py compares the two after every random event). What is left per snapshot is
the comparison and a pass over the nodes.
"""

from __future__ import annotations

import threading

from policies.gpu_demand import pod_gpu_demand
from policies.vocabulary.objects import PodView
from webhook.cluster.model import ClusterModel
from webhook.cluster.pod_changes import PodList, changed_pods
from webhook.placement.rooms import node_gpus, per_snapshot


def _held(pod: object) -> tuple[str, int] | None:
    """The node an unfinished bound pod is on and the whole GPUs it holds there (a terminating pod still holds
    its GPUs)."""
    if not isinstance(pod, dict):
        return None
    view = PodView(pod)
    node = view.node_name
    if not node or view.terminal:
        return None
    return node, pod_gpu_demand(view).whole_gpus


class HeldGpus:
    """The whole GPUs each node's unfinished bound pods hold, moved pod by pod: the count behind `free_gpus`, which
    the quota controller also keeps with its picture (webhook/quotas/incremental.py). Not locked: its owner's."""

    def __init__(self) -> None:
        self._used: dict[str, int] = {}

    def clear(self) -> None:
        self._used = {}

    def move(self, pod: object, sign: int) -> bool:
        """Count `pod` (`sign` 1) or take it off (-1); whether the count moved."""
        held = _held(pod)
        if held is None or not held[1]:
            return False
        node, gpus = held
        left = self._used.get(node, 0) + sign * gpus
        if left:
            self._used[node] = left
        else:
            del self._used[node]
        return True

    def free(self, model: ClusterModel) -> dict[str, int]:
        """GPUs not held, per schedulable node of `model`."""
        used = self._used
        return {name: max(0, node_gpus(facts) - used.get(name, 0))
                for name, facts in model.nodes.items() if not facts.unschedulable}


class KeptFreeGpus:
    """GPUs held per node, moved by the pods that changed since the last snapshot asked. Safe from any thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held = HeldGpus()
        self._pods: PodList | None = None  # the pods `_held` counts

    def free(self, model: ClusterModel) -> dict[str, int]:
        with self._lock:
            before, self._pods = self._pods, None  # a count that fails is made again from every pod
            now = PodList(model.pods)
            if before is None:
                self._held.clear()
                moved: list[tuple[object, object]] = [(None, pod) for pod in now.objects]
            else:
                moved = [(before.by_key.get(key), now.by_key.get(key)) for key in changed_pods(before, now)]
            for old, new in moved:
                self._held.move(old, -1)
                self._held.move(new, 1)
            self._pods = now
            return self._held.free(model)


_KEPT = KeptFreeGpus()


@per_snapshot
def free_gpus(model: ClusterModel) -> dict[str, int]:
    """GPUs not held by an unfinished bound pod, per schedulable node (callers must not change the answer)."""
    return _KEPT.free(model)


__all__ = ["HeldGpus", "KeptFreeGpus", "free_gpus"]
