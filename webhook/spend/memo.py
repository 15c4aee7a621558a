"""Every GPU pod's rate (rates.py `pod_rate`) kept between reads of the spend, by pod object (issue 36: at
150,000 pods, computing each pod's GPU demand, equivalents, containers and workload again for every costs
request was most of its time).

The store never changes an object in place (webhook/quota_charges.py `ChargeEpochs`), so a remembered rate
stays right while its pod object, the facts of its node and the context are the same objects. Where a rate
reads more than that, it is computed again each read:
- a pod on no known or no typed node is priced by every type's sharing mode: its entry also keeps the epoch
  of every node's facts;
- a pod that names ResourceClaims (or a claim the scheduler made for it) pays for them only while it is
  their payer (webhook/dra/holders.py), which other pods and the claims decide: never remembered.
The context is the accelerator table, the HardwareProfiles, the Namespaces and the DeviceClasses (as
webhook/quota_charges.py `ChargeEpochs` reads them for the quota pass's and the audit's memos; the spend
wing may not import it: it reaches the admission core) and the configuration (prices, excluded namespaces).
The tenant of a pod without `kgwe.io/tenant` is resolved again each read (TenantQuotas may move a namespace).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

from policies.vocabulary import keys
from webhook.cluster.model import ClusterModel
from webhook.cluster.node_facts import NodeFacts
from webhook.cluster.read_epochs import ChargeEpochs, bound_node
from webhook.config import Config
from webhook.spend.rates import PodRate, pod_rate, tenant_resolver


@dataclass(frozen=True, slots=True)
class _Entry:
    pod: dict[str, Any]
    node: NodeFacts | None
    nodes_epoch: int
    rate: PodRate | None  # None: not a GPU pod bound to a node
    named: bool  # its tenant is its own `kgwe.io/tenant`


def names_claims(pod: dict[str, Any]) -> bool:
    """Whether the pod names ResourceClaims or has a claim the scheduler made for it: what makes a pod a
    candidate payer in webhook/dra/holders.py."""
    spec, status = pod.get("spec"), pod.get("status")
    return bool((isinstance(spec, dict) and spec.get("resourceClaims"))
                or (isinstance(status, dict) and status.get("extendedResourceClaimStatus")))


class RateMemo:
    """The rates of one snapshot's pods, computing only the pods whose inputs changed since the last call."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # the API's threads and the budget refresh may read at once
        self._epochs = ChargeEpochs()
        self._context: tuple[int, Config] | None = None  # the config kept, so its id is never another's
        self._entries: dict[int, _Entry] = {}
        self.computed = 0  # pods computed by the last call (the rest were looked up)

    def rates(self, model: ClusterModel, config: Config, pods: Iterable[dict[str, Any]] | None = None
              ) -> list[PodRate]:
        """`list(pod_rates(model, config))`, in the same order, from what each pod object gave last time.
        `pods`: these instead of the snapshot's. Entries of pods not read here are forgotten."""
        with self._lock:
            rates = self._rates_of(model, config, model.pods.values() if pods is None else pods, fresh=True)
            return [rate for rate in rates if rate is not None]

    def rates_of(self, model: ClusterModel, config: Config, pods: Iterable[dict[str, Any]]) -> list[PodRate | None]:
        """The rate of each of `pods` of `model` (None: not a GPU pod bound to a node), keeping what it computes
        beside the other pods' entries: for a reader that asks only the pods that changed (the bound-pod
        controller), which tells `forget` the pods it no longer reads."""
        with self._lock:
            return self._rates_of(model, config, pods, fresh=False)

    def forget(self, pods: Iterable[dict[str, Any]]) -> None:
        """Drop the entries of these pod objects (gone from the reader that asked them with `rates_of`)."""
        with self._lock:
            for raw in pods:
                entry = self._entries.get(id(raw))
                if entry is not None and entry.pod is raw:
                    del self._entries[id(raw)]

    def _rates_of(self, model: ClusterModel, config: Config, pods: Iterable[dict[str, Any]], *, fresh: bool
                  ) -> list[PodRate | None]:
        """The rates of `pods`, each looked up in the kept entries; `fresh`: the kept entries are then those of
        `pods` only, else `pods`' are added to them. The caller holds the lock."""
        nodes_epoch, context_epoch = self._epochs.advance(model)
        if self._context is None or self._context[0] != context_epoch or self._context[1] is not config:
            self._entries = {}
        self._context = (context_epoch, config)
        previous = self._entries
        entries: dict[int, _Entry] = {} if fresh else previous
        tenant_of = tenant_resolver(model)
        out: list[PodRate | None] = []
        computed = 0
        for raw in pods:
            node = bound_node(raw, model)
            entry = previous.get(id(raw))
            if entry is None or entry.pod is not raw or entry.node is not node or (
                    (node is None or not node.is_typed) and entry.nodes_epoch != nodes_epoch):
                entry = self._read(raw, node, nodes_epoch, model, config, tenant_of)
                computed += 1
            if not names_claims(raw):
                entries[id(raw)] = entry
            rate = entry.rate
            if rate is not None and not entry.named and (tenant := tenant_of(rate.namespace)) != rate.tenant:
                rate = replace(rate, tenant=tenant)
            out.append(rate)
        self._entries = entries
        self.computed = computed
        return out

    @staticmethod
    def _read(raw: dict[str, Any], node: NodeFacts | None, nodes_epoch: int, model: ClusterModel, config: Config,
              tenant_of: Any) -> _Entry:
        rate = pod_rate(raw, model, config, tenant_of)
        notes = (raw.get("metadata") or {}).get("annotations") or {}
        return _Entry(raw, node, nodes_epoch, rate, bool(notes.get(keys.TENANT)))
