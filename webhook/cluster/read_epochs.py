"""Whether what a per-pod memo read of a snapshot still holds: the epochs of the inputs every pod's reading shares,
and the node a pod is bound to. The store never changes an object in place, so the same objects mean the same
inputs."""

from __future__ import annotations

from typing import Any

from webhook.cluster.model import ClusterModel
from webhook.cluster.node_facts import NodeFacts


class ChargeEpochs:
    """Which snapshot a remembered charge was read against, as two epochs: one moves when any node's facts
    change (a pod on no known node is priced by every type's sharing mode), the other when the accelerator
    table, a HardwareProfile, a Namespace (its labels) or a DeviceClass does. The store never changes an object
    in place, so the same objects mean the same inputs. The per-pod memos key what they read on these (the
    inventory's InventoryMemo, webhook/audit/charges.py ChargeMemo, webhook/spend/memo.py RateMemo)."""

    def __init__(self) -> None:
        self._nodes: tuple[int, ...] = ()
        self._context: tuple[object, ...] | None = None
        self._profiles: tuple[tuple[str, object], ...] | None = None
        self.epochs = (0, 0)  # (nodes, context)

    def advance(self, model: ClusterModel) -> tuple[int, int]:
        """The epochs of `model`'s inputs, moved on from the last call's where they changed. A HardwareProfile
        counts by its spec's value (what a charge, a price or a plan reads of it): the status KGWE writes to each
        profile (webhook/server/status_sync.py, whenever free GPUs move) made every per-pod memo read every pod
        again (issue 36)."""
        nodes = tuple(id(facts) for facts in model.nodes.values())
        context = (id(model.table), tuple(map(id, model.namespaces.values())),
                   tuple(map(id, model.device_classes.values())))
        profiles = profile_specs(model)
        nodes_epoch, context_epoch = self.epochs
        if nodes != self._nodes:
            self._nodes, nodes_epoch = nodes, nodes_epoch + 1
        if context != self._context or profiles != self._profiles:
            self._context, self._profiles, context_epoch = context, profiles, context_epoch + 1
        self.epochs = (nodes_epoch, context_epoch)
        return self.epochs


def profile_specs(model: ClusterModel) -> tuple[tuple[str, object], ...]:
    """Each HardwareProfile's name and spec: compared by value, equal for two objects that differ in status only."""
    return tuple((name, profile.get("spec")) for name, profile in model.hardware_profiles.items())


def bound_node(pod: dict[str, Any], model: ClusterModel) -> NodeFacts | None:
    """The facts of the node `pod` is bound to, where the snapshot knows it."""
    spec = pod.get("spec")
    node_name = spec.get("nodeName") if isinstance(spec, dict) else None
    return model.nodes.get(node_name) if isinstance(node_name, str) and node_name else None
