"""What the nodes' view reads of an inventory, from a pass lighter than the full one: the first build's at start
(webhook/inventory/cache.py `first_views`), so that `/api/v1/nodes` and the UI's first page are answered before
the full inventory is computed (issue 36: at 150,000 pods the full first build, every pod's charge, cost and
pending row, took over 50 s of wall time at ready beside the controllers' first passes, and the read at ready got
a 503). Per pod it reads its GPU demand and where it is, nothing else."""

from __future__ import annotations

from policies.gpu_demand import pod_gpu_demand
from policies.vocabulary.objects import PodView
from webhook.intent import OUT_ACCELERATOR_TYPE
from webhook.inventory.capacity import Inventory
from webhook.inventory.node_units import demand_resources


class NodeUse(Inventory):
    """An `Inventory` with only what the nodes' view reads, equal there to the full one's: each node's use and GPU
    pods, and what unbound pods ask per type. Charges, costs, pending rows and tenants stay empty: no other view
    may be rendered from it."""

    def _collect_pods(self) -> None:
        model = self.model
        for raw in model.pods.values():
            pod = PodView(raw)
            if pod.terminal:
                continue
            demand = pod_gpu_demand(pod)
            if not demand.asks_gpu:
                continue
            node_name = pod.node_name
            if node_name:
                self._add_node_use(node_name, demand_resources(demand, model.nodes.get(node_name)))
            else:  # as the full pass counts a pending pod (capacity.py `_pod_facts`, `_add_pod`)
                types = (t for t in pod.annotations.get(OUT_ACCELERATOR_TYPE, "").split(",") if t in model.types)
                self._add_pending_ask(types, demand.whole_gpus, demand.mig)
