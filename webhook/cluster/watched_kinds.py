"""The kinds the cluster source lists and watches, and where the API serves them.

The built-in kinds KGWE reads (nodes, pods, namespaces, RBAC), its own custom resources, DRA's kinds and,
for the views, the workload kinds of the kind table (webhook/cluster/workloads.py). A `custom` kind may
be absent (its CRD not installed, or an API server too old to serve it); a `view_only` kind is read for
the views only, so readiness does not wait for it and a 403 counts as absent.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from policies.vocabulary import keys

CRD_GROUP_VERSION = keys.API_VERSION
RBAC_GROUP_VERSION = "rbac.authorization.k8s.io/v1"
DRA_GROUP_VERSION = "resource.k8s.io/v1"


@dataclass(frozen=True)
class WatchedKind:
    kind: str
    api_version: str
    path: str  # the cluster-wide collection, e.g. /api/v1/pods
    namespaced: bool = False
    custom: bool = False  # served by a CRD that may not be installed
    # Read for the views only (workloads, webhook/cluster/workloads.py): a 403 (no RBAC for it) counts as
    # absent like a missing CRD, and readiness does not wait for its first list.
    view_only: bool = False


def workload_watches(kinds: Iterable[tuple[str, str, str]]) -> tuple[WatchedKind, ...]:
    """Watches of workload kinds given as (kind, apiVersion, resource), cluster-wide, CRD-optional and
    view-only; a kind name seen twice (two groups) is watched once, the first one."""
    found: dict[str, WatchedKind] = {}
    for kind, api_version, resource in kinds:
        prefix = "/api" if "/" not in api_version else "/apis"
        found.setdefault(kind, WatchedKind(kind, api_version, f"{prefix}/{api_version}/{resource}",
                                           namespaced=True, custom=True, view_only=True))
    return tuple(found.values())


WATCHED_KINDS: tuple[WatchedKind, ...] = (
    WatchedKind("Node", "v1", "/api/v1/nodes"),
    WatchedKind("Pod", "v1", "/api/v1/pods", namespaced=True),
    WatchedKind("Namespace", "v1", "/api/v1/namespaces"),
    WatchedKind("Role", RBAC_GROUP_VERSION, f"/apis/{RBAC_GROUP_VERSION}/roles", namespaced=True),
    WatchedKind("ClusterRole", RBAC_GROUP_VERSION, f"/apis/{RBAC_GROUP_VERSION}/clusterroles"),
    WatchedKind("RoleBinding", RBAC_GROUP_VERSION, f"/apis/{RBAC_GROUP_VERSION}/rolebindings", namespaced=True),
    WatchedKind("ClusterRoleBinding", RBAC_GROUP_VERSION, f"/apis/{RBAC_GROUP_VERSION}/clusterrolebindings"),
    WatchedKind("HardwareProfile", CRD_GROUP_VERSION, f"/apis/{CRD_GROUP_VERSION}/hardwareprofiles", custom=True),
    WatchedKind("TenantQuota", CRD_GROUP_VERSION, f"/apis/{CRD_GROUP_VERSION}/tenantquotas", custom=True),
    WatchedKind("GPUPolicy", CRD_GROUP_VERSION, f"/apis/{CRD_GROUP_VERSION}/gpupolicies", custom=True),
    WatchedKind("MIGStrategy", CRD_GROUP_VERSION, f"/apis/{CRD_GROUP_VERSION}/migstrategies", custom=True),
    # DRA (GA in 1.34): `custom` because older API servers do not serve resource.k8s.io/v1 at all.
    WatchedKind("ResourceSlice", DRA_GROUP_VERSION, f"/apis/{DRA_GROUP_VERSION}/resourceslices", custom=True),
    WatchedKind("DeviceClass", DRA_GROUP_VERSION, f"/apis/{DRA_GROUP_VERSION}/deviceclasses", custom=True),
    WatchedKind(
        "ResourceClaim", DRA_GROUP_VERSION, f"/apis/{DRA_GROUP_VERSION}/resourceclaims", namespaced=True, custom=True
    ),
)
