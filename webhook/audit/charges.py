"""The audit's quota usage, remembered per pod object: a pass over 150,000 pods of which ten changed computes
ten charges and looks the rest up (issue 36: every pod's charge was 44 % of a busy worker at that size).

The store never changes an object in place (a changed pod, node or namespace is a new dict, node facts are
rebuilt only when their node changes), so a charge stays right while the objects it was read from are the
same objects: the pod; the node facts of the node it is bound to, or, for a pod on no known node, every
node's facts (the types' sharing modes decide its equivalents before binding); and, for every pod, the
accelerator table, the HardwareProfiles, the Namespaces (their labels) and the DeviceClasses. Whether a pod
asks DRA devices of its own is remembered the same way; what its claims hold is read again each pass, for
those pods only (the DRA wing's `claimed_charges` looks at every pod). An entry
holds its pod, so the identity it is keyed by cannot be reused by another object while it is remembered.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from policies.quota.model import PodCharge
from webhook.cluster.claim_charging import CLAIM_CHARGING, ClaimCharges
from webhook.cluster.device_classes import charged_through_claims, mapped_resources
from webhook.cluster.model import ClusterModel, pod_is_finished
from webhook.cluster.node_facts import NodeFacts
from webhook.cluster.read_epochs import ChargeEpochs, bound_node
from webhook.quota_charges import pod_charge, still_read


@dataclass(frozen=True, slots=True)
class _Entry:
    pod: dict[str, Any]
    node: NodeFacts | None  # the facts of the node the pod is bound to, when the snapshot knows it
    nodes_epoch: int  # for a pod on no known node: which set of node facts its charge was read against
    charge: PodCharge | None
    own_devices: bool  # it names claims or asks DRA devices as extended resources: charged through its claims


class ChargeMemo:
    """`usage_charges` of webhook/quota_charges.py over successive snapshots, each pod's charge computed
    only when the pod or what its charge reads changed (tests/audit/test_charge_memo.py compares it with a
    fresh computation over a changing cluster)."""

    def __init__(self) -> None:
        self._entries: dict[int, _Entry] = {}
        self._epochs = ChargeEpochs()
        self._context_epoch = 0
        self.computed = 0  # charges computed by the last call (the rest were looked up)

    def usage_charges(self, model: ClusterModel) -> list[PodCharge]:
        nodes_epoch, context_epoch = self._epochs.advance(model)
        if context_epoch != self._context_epoch:
            self._entries.clear()
            self._context_epoch = context_epoch
        previous, entries = self._entries, {}
        charges: list[PodCharge] = []
        claimed: list[PodCharge] = []
        mapped = mapped_resources(model.device_classes)
        usage: list[ClaimCharges] = []  # the claims made ready once, and only when a pod asks devices its own way
        computed = 0
        for pod in model.pods.values():
            if pod_is_finished(pod):
                continue
            node = bound_node(pod, model)
            entry = previous.get(id(pod))
            if entry is None or not still_read(entry, pod, node, nodes_epoch):
                entry = _Entry(pod, node, nodes_epoch, pod_charge(pod, model, None),
                               charged_through_claims(pod, mapped))
                computed += 1
            entries[id(pod)] = entry
            if entry.charge is not None:
                charges.append(entry.charge)
            if entry.own_devices:
                # What its claims hold changes with the claims, not the pod: read again each pass.
                if not usage:
                    usage.append(CLAIM_CHARGING.value.claim_charges(model, mapped))
                claimed.extend(usage[0].charges(pod))
        self._entries = entries
        self.computed = computed
        return charges + claimed
