"""Mode `apply`: the leader sets `nvidia.com/mig.config` on the nodes a plan changes; NVIDIA's MIG manager
re-partitions them. The only part of the wing that writes.

Safety comes before the plan: KGWE never evicts, so a node is labelled only when, read from the API just
before the write, no pod that holds GPUs is bound to it (a pod scheduled since the plan was made skips the
node), and the patch carries the node's resourceVersion as planned (a node changed meanwhile answers 409 and
is planned again next pass). A node is changed at most once per `rebalanceInterval` (the strategy's status
keeps when). The MIG manager must know the config the label names: before the label, the config is added to
the MIG manager's ConfigMap (`migManager` in the configuration) unless it is there, through the kernel's record
store (policies/kernel/records.py): a replace that carries the resourceVersion read (a ConfigMap changed
meanwhile answers 409 and is read again); no other config is removed or changed, and a config of that name that
says something else stops the node.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from policies.gpu_demand import pod_gpu_demand
from policies.kernel.records import Codec, Conflict, JsonApi, ObjectPlace, RecordStore, Unavailable
from policies.vocabulary.objects import PodView
from webhook.cluster.model import ClusterStore
from webhook.config import MigManager
from webhook.migplan.mig_config import with_config
from webhook.migplan.strategy import duration_seconds
from webhook.migplan.views import MIG_CONFIG_LABEL, NodePlanDoc, plan_cluster

log = logging.getLogger("kgwe.migplan.apply")
FIELD_MANAGER = "kgwe-mig-plan"
CONFIG_ATTEMPTS = 3  # reads and replaces of the MIG manager's ConfigMap per node and pass


@dataclass(frozen=True)
class Applied:
    strategy: str
    node: str
    outcome: str  # labelled | skipped
    reason: str


def _stamp(moment: float) -> str:
    return datetime.fromtimestamp(moment, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _seconds(stamp: Any) -> float | None:
    try:
        return datetime.fromisoformat(str(stamp).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


class MigApplier:
    def __init__(self, store: ClusterStore, api: JsonApi | None, is_leader: Callable[[], bool],
                 clock: Callable[[], float] = time.time, manager: MigManager | None = None) -> None:
        self.store = store
        self.api = api
        self.is_leader = is_leader
        self.clock = clock
        self.manager = manager or MigManager()

    def _gpu_pods_on(self, node: str) -> list[str]:
        assert self.api is not None
        listed = self.api.request("GET", "/api/v1/pods", query=[("fieldSelector", f"spec.nodeName={node}")])
        found = []
        for raw in (listed or {}).get("items") or []:
            pod = PodView(raw)
            if pod.node_name == node and not pod.terminal and (pod_gpu_demand(pod).asks_gpu or pod.resource_claims):
                found.append(f"{pod.namespace}/{pod.name}")
        return found

    def _config_map(self) -> RecordStore[str | None]:
        """The MIG manager's ConfigMap as a record: the text of its configs' key (None: the key is not there)."""
        assert self.api is not None
        manager = self.manager

        def decode(obj: dict[str, Any] | None) -> str | None:
            return ((obj or {}).get("data") or {}).get(manager.key)

        def encode(text: str | None, obj: dict[str, Any]) -> dict[str, Any]:
            # Into the object read: every other key, label and config is kept.
            obj["data"] = {**(obj.get("data") or {}), manager.key: text}
            return obj

        place = ObjectPlace(f"/api/v1/namespaces/{manager.namespace}/configmaps", manager.config_map, "v1",
                            "ConfigMap", manager.namespace)
        return RecordStore(self.api, place, Codec(decode, encode), query=[("fieldManager", FIELD_MANAGER)])

    def _ensure_config(self, name: str, entries: list[dict[str, Any]]) -> str | None:
        """Config `name` in the MIG manager's ConfigMap, added when missing; None when it is there, else why not."""
        manager = self.manager
        where = f"{manager.namespace}/{manager.config_map}"
        config_map = self._config_map()
        for _attempt in range(CONFIG_ATTEMPTS):
            try:
                found = config_map.read()
            except Unavailable as exc:
                if exc.status == 403:
                    return f"KGWE may not read the ConfigMap {where}: enable webhook.migApply in the chart"
                raise
            if not found.version:
                return f"the MIG manager's ConfigMap {where} does not exist (migManager in the configuration)"
            text, problem = with_config(found.value, name, entries)
            if problem is not None:
                return f"{where}: {problem}"
            if text is None:
                return None  # already there
            try:
                config_map.write(text, found.version)
            except Conflict:
                continue  # changed (or deleted) since it was read: read it again
            except Unavailable as exc:
                if exc.status == 403:
                    return f"KGWE may not update the ConfigMap {where}: enable webhook.migApply in the chart"
                raise
            log.info("MIG manager ConfigMap %s: added config %s", where, name)
            return None
        return f"the ConfigMap {where} changed under every one of {CONFIG_ATTEMPTS} writes: tried again next pass"

    def _label(self, plan: NodePlanDoc, entries: list[dict[str, Any]]) -> str | None:
        """Set the label (its config first in the MIG manager's ConfigMap); None when done, else why not."""
        from kubernetes.client.exceptions import ApiException

        assert self.api is not None and plan.config
        busy = self._gpu_pods_on(plan.node)
        if busy:
            return f"a pod holding GPUs is bound to it now ({', '.join(busy[:3])}): KGWE never evicts"
        missing = self._ensure_config(plan.config, entries)
        if missing:
            return missing
        metadata: dict[str, Any] = {"labels": {MIG_CONFIG_LABEL: plan.config}}
        if plan.resource_version:
            metadata["resourceVersion"] = plan.resource_version
        body = {"metadata": metadata}
        try:
            self.api.request("PATCH", f"/api/v1/nodes/{plan.node}", body=body,
                             query=[("fieldManager", FIELD_MANAGER)], content_type="application/merge-patch+json")
        except ApiException as exc:
            if exc.status == 409:
                return "the node changed since it was planned (409): planned again next pass"
            if exc.status == 403:
                return "KGWE may not patch nodes: enable webhook.migApply in the chart (docs/mig.md)"
            raise
        return None

    def run_pass(self) -> list[Applied]:
        """One pass over the strategies in mode apply; each strategy's status gets the plan of every node."""
        if self.api is None or not self.is_leader():
            return []
        model = self.store.snapshot(at_least=self.store.generation)  # the store as it is now, from the shared rebuild
        doc = plan_cluster(model)
        now = self.clock()
        done: list[Applied] = []
        for strategy in doc.strategies:
            if strategy.mode != "apply":
                continue
            raw = model.mig_strategies.get(strategy.name) or {}
            before = {n.get("node"): n for n in ((raw.get("status") or {}).get("nodes") or []) if isinstance(n, dict)}
            interval = duration_seconds(strategy.rebalance_interval or "10m")
            rows = []
            for plan in strategy.nodes:
                row: dict[str, Any] = {"node": plan.node, "action": plan.action, "reason": plan.reason,
                                       "planned": plan.planned}
                applied_at = before.get(plan.node, {}).get("applied")
                if applied_at:
                    row["applied"] = applied_at
                if plan.action == "change" and plan.config:
                    row["config"] = plan.config
                    last = _seconds(applied_at) if applied_at else None
                    if last is not None and now - last < interval:
                        why = f"changed {int(now - last)}s ago, rebalanceInterval {strategy.rebalance_interval}"
                    else:
                        why = self._label(plan, doc.mig_config["mig-configs"][plan.config]) or ""
                    if why:
                        row["reason"] = why
                        done.append(Applied(strategy.name, plan.node, "skipped", why))
                    else:
                        row["applied"] = _stamp(now)
                        done.append(Applied(strategy.name, plan.node, "labelled", plan.config))
                        log.info("MIGStrategy %s: %s=%s on node %s", strategy.name, MIG_CONFIG_LABEL, plan.config,
                                 plan.node)
                rows.append(row)
            self.api.request("PATCH", f"/apis/kgwe.io/v1alpha1/migstrategies/{strategy.name}/status",
                             body={"status": {"lastPlanned": _stamp(now), "nodes": rows}},
                             query=[("fieldManager", FIELD_MANAGER)], content_type="application/merge-patch+json")
        return done
