"""Workload objects in the cluster model: the kinds of the workload kind table, bounded.

The model keeps workloads (Deployments, Jobs, JobSets, ... and the kinds an administrator adds) only
for the read-only views: `kgwe audit` and the Workloads page judge their GPU templates as the validating
webhook would. Admission never reads them, so they are bounded rather than complete: at most
`MAX_WORKLOADS_PER_KIND` objects of one kind are kept (first come, in key order on a full reload), and
what KGWE never reads and can be large (`status`, `managedFields`) is dropped on the way in.
"""

from __future__ import annotations

import logging
from typing import Any

from policies.vocabulary.objects import ObjectView

log = logging.getLogger("kgwe.cluster")

# The kind names the store keeps before the configuration adds its own: the kinds of the built-in kind table
# (webhook/workload_kinds.py `BUILTIN_KINDS`, which the workloads wing admits by), named here for the model
# (tests/cluster/test_workload_kind_names.py holds the two equal).
WORKLOAD_KINDS: tuple[str, ...] = (
    "Deployment", "StatefulSet", "ReplicaSet", "DaemonSet", "Job", "CronJob", "JobSet", "LeaderWorkerSet",
    "PyTorchJob", "RayJob", "RayCluster",
)
# A view, not admission: ten thousand Deployments are already more than a page shows.
MAX_WORKLOADS_PER_KIND = 2000


def slim_workload(obj: dict[str, Any]) -> dict[str, Any]:
    """The workload without `status` and `metadata.managedFields` (the templates stay whole: policies
    read their containers' images, security contexts and environment)."""
    meta = ObjectView(obj).metadata
    if "status" not in obj and "managedFields" not in meta:
        return obj
    out = {k: v for k, v in obj.items() if k != "status"}
    out["metadata"] = {k: v for k, v in meta.items() if k != "managedFields"}
    return out


def workload_key(obj: dict[str, Any]) -> str:
    """`Kind/namespace/name`: the key of a workload in `ClusterModel.workloads`."""
    view = ObjectView(obj)
    return f"{view.kind}/{view.namespace or 'default'}/{view.name}"


def over_bound(kind: str, held: int) -> bool:
    """True (and logged) when a kind already holds as many workloads as the model keeps."""
    if held < MAX_WORKLOADS_PER_KIND:
        return False
    log.warning("cluster model: more than %d %s objects; the rest are left out of the workload views",
                MAX_WORKLOADS_PER_KIND, kind)
    return True
