"""`kgwe profiles --kueue`: Kueue ResourceFlavors and a ClusterQueue skeleton for the cluster's GPUs.

KGWE rewrites a workload's templates at CREATE (a MIG slice becomes `nvidia.com/mig-<profile>`, a type
becomes a nodeSelector), so Kueue's Workload counts what the pods will ask for. For that count to meet
a quota, Kueue needs flavors for the same accelerator types and resource names: one ResourceFlavor per
accelerator type (the node labels that select exactly its nodes, its GPU taints as tolerations), and
a ClusterQueue whose resource group covers whole GPUs and MIG slices (mixed strategy), each flavor's
nominal quota the cluster's current allocatable capacity, for the admin to cut down.

Written as `kueue.x-k8s.io/v1beta2`, the version Kueue stores and the only one recent releases serve:
ResourceFlavor is as in v1beta1; ClusterQueue names its cohort `cohortName` (v1beta1 `cohort`). On a
cluster whose GPUs are DRA devices the output adds the Configuration mappings Kueue needs to count
them (webhook/workloads/kueue_dra.py) and the flavors cover those quota names too.
"""

from __future__ import annotations

from typing import Any

import yaml

from policies.vocabulary import resources
from webhook.cluster.model import ClusterModel
from webhook.wing_config import DraConfig
from webhook.workloads.kueue_dra import device_class_mappings, dra_capacity, kueue_configuration

KUEUE_API = "kueue.x-k8s.io/v1beta2"
GPU = resources.NVIDIA_GPU


def kueue_manifests(
    model: ClusterModel, queue_name: str = "gpu", *, cohort: str | None = None, dra: DraConfig | None = None
) -> list[dict[str, Any]]:
    """ResourceFlavors (one per accelerator type), one ClusterQueue covering them (in `cohort` when
    given) and, when nodes publish GPUs through DRA, Kueue's deviceClassMappings for them."""
    flavors: list[dict[str, Any]] = []
    per_type: list[tuple[str, dict[str, int]]] = []
    for type_id in sorted(model.types):
        summary = model.types[type_id]
        if type_id in ("unknown", "mixed"):
            continue  # no label selects such nodes as one kind of GPU
        flavor: dict[str, Any] = {"apiVersion": KUEUE_API, "kind": "ResourceFlavor", "metadata": {"name": type_id},
                                  "spec": {}}
        selector = summary.selector()
        if selector is not None and len(selector[1]) == 1:
            flavor["spec"]["nodeLabels"] = {selector[0]: selector[1][0]}
        tolerations = [
            {"key": t.key, "operator": "Exists", "effect": t.effect}
            for t in sorted(summary.gpu_taints, key=lambda t: (t.key, t.effect))
        ]
        if tolerations:
            flavor["spec"]["tolerations"] = tolerations
        flavors.append(flavor)
        capacity = {GPU: int(sum((model.nodes[n].allocatable.get(GPU, 0) for n in summary.nodes), start=0))}
        capacity.update({f"nvidia.com/mig-{p}": o.devices for p, o in summary.mig.items() if "mixed" in o.strategies})
        capacity.update(dra_capacity(model, summary.nodes))
        per_type.append((type_id, capacity))
    covered = [GPU, *sorted({r for _t, c in per_type for r in c if r != GPU})]
    # One resource group: a flavor may appear in only one group, and each flavor lists every covered
    # resource (0 where its nodes have none), as Kueue validates.
    groups = [{
        "coveredResources": covered,
        "flavors": [
            {"name": type_id, "resources": [{"name": r, "nominalQuota": capacity.get(r, 0)} for r in covered]}
            for type_id, capacity in per_type
        ],
    }] if per_type else []
    spec: dict[str, Any] = {"namespaceSelector": {}, "resourceGroups": groups}
    if cohort:
        spec = {"cohortName": cohort, **spec}
    queue = {"apiVersion": KUEUE_API, "kind": "ClusterQueue", "metadata": {"name": queue_name}, "spec": spec}
    mappings = device_class_mappings(model, dra or DraConfig())
    return [*flavors, queue, *([kueue_configuration(mappings)] if mappings else [])]


def render_kueue(model: ClusterModel, queue_name: str = "gpu", *, cohort: str | None = None,
                 dra: DraConfig | None = None) -> str:
    header = (
        "# Kueue flavors and a ClusterQueue skeleton for this cluster's GPUs (kgwe profiles --kueue).\n"
        "# Nominal quotas are today's capacity: lower them, add cpu/memory resource groups, and point\n"
        "# LocalQueues at the ClusterQueue. KGWE mutates queued workloads at CREATE, so their Workloads\n"
        "# already ask for these resource names. A Configuration document, when present, is for Kueue's\n"
        "# own configuration (the kueue-manager-config ConfigMap): merge its deviceClassMappings there,\n"
        "# or Kueue cannot count (and will not admit) pods whose GPUs are DRA claims.\n"
    )
    manifests = kueue_manifests(model, queue_name, cohort=cohort, dra=dra)
    return header + yaml.safe_dump_all(manifests, sort_keys=False).rstrip()
