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
        `pods`: these instead of the snapshot's (the bound-pod controller's, with the annotations it wrote)."""
        with self._lock:
            nodes_epoch, context_epoch = self._epochs.advance(model)
            context = (context_epoch, config)
            previous = self._entries if self._context is not None and self._context[0] == context_epoch \
                and self._context[1] is config else {}
            self._context = context
            tenant_of = tenant_resolver(model)
            entries: dict[int, _Entry] = {}
            out: list[PodRate] = []
            computed = 0
            for raw in model.pods.values() if pods is None else pods:
                node = bound_node(raw, model)
                entry = previous.get(id(raw))
                if entry is None or entry.pod is not raw or entry.node is not node or (
                        (node is None or not node.is_typed) and entry.nodes_epoch != nodes_epoch):
                    entry = self._read(raw, node, nodes_epoch, model, config, tenant_of)
                    computed += 1
                if not names_claims(raw):
                    entries[id(raw)] = entry
                rate = entry.rate
                if rate is None:
                    continue
                if not entry.named and (tenant := tenant_of(rate.namespace)) != rate.tenant:
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
