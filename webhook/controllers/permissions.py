"""What the controllers need of the API, checked before they need it: CRDs served and RBAC granted.

Without them pods wait gated in silence (a quota gate nobody may lift, a gang ledger that cannot be written),
so every replica asks the API server itself, at start and every `interval` seconds: API discovery for
KGWE's kinds, and a SelfSubjectAccessReview for each verb the controllers use. What is missing is a reason
`/readyz` answers 503 with, naming the CRD or the verb and resource, and a line in the log.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from policies.kernel.background import Task

if TYPE_CHECKING:  # the client is imported where a cluster is asked, not for a directory
    from webhook.cluster.kube_json import KubeJson

log = logging.getLogger("kgwe.controllers.permissions")


@dataclass(frozen=True)
class Need:
    group: str
    resource: str
    verb: str
    subresource: str = ""
    why: str = ""
    namespaced: bool = False  # granted by a Role in KGWE's own namespace, not the ClusterRole

    @property
    def described(self) -> str:
        name = self.resource + (f"/{self.subresource}" if self.subresource else "")
        return f"{self.verb} {name}{'.' + self.group if self.group else ''}"


# The verbs the leader's controllers use (webhook/quotas/controller.py, webhook/gangs/controller.py,
# webhook/controllers/leader.py).
NEEDS = (
    Need("", "pods", "patch", why="the quota and gang controllers remove their scheduling gates"),
    Need("", "pods", "patch", "status", why="waiting pods get the kgwe.io/QuotaAvailable condition"),
    Need("", "events", "create", why="waiting pods get an Event saying why"),
    Need("kgwe.io", "tenantquotas", "patch", "status", why="TenantQuota status says what is used and waits"),
    Need("kgwe.io", "gangledgers", "update", why="the gang ledger records which room each gang was promised"),
    Need("coordination.k8s.io", "leases", "update", why="one replica leads the controllers", namespaced=True),
)
# Where the Workload API is served (native gang scheduling, webhook/gangs/native.py): what the gang controller
# does with a gang's Workload and PodGroup at release (created; read back, owners followed or replaced when a
# previous run left one that does not suit).
NATIVE_GANG_NEEDS = tuple(
    Need("scheduling.k8s.io", resource, verb, why=f"a released gang's {kind} (native gang scheduling)")
    for resource, kind in (("workloads", "Workload"), ("podgroups", "PodGroup"))
    for verb in ("create", "get", "patch", "delete")
)
# KGWE's kinds the controllers read or write: served by the API only once the chart's CRDs are installed.
CRDS = (("kgwe.io/v1alpha1", "tenantquotas", "TenantQuota"), ("kgwe.io/v1alpha1", "gangledgers", "GangLedger"))


class ControllerReadiness:
    """The missing CRDs and permissions, as `/readyz` reasons; empty without an API client (directory mode)."""

    def __init__(
        self,
        api_client: Any | None,
        namespace: str,
        interval: float = 60.0,
        extra_needs: Callable[[], Iterable[Need]] = tuple,
    ) -> None:
        """`extra_needs`: verbs needed only while the cluster has what uses them (NATIVE_GANG_NEEDS while the
        Workload API is served), asked anew at every check."""
        self.api: KubeJson | None = None
        if api_client is not None:
            from webhook.cluster.kube_json import KubeJson  # a cluster: its client is loaded already

            self.api = KubeJson(api_client)
        self.namespace = namespace
        self.extra_needs = extra_needs
        self._problems: tuple[str, ...] = ()
        self._lock = threading.Lock()
        self.task = Task("controller-permissions", self.check, interval=interval, run_at_start=True)

    def problems(self) -> list[str]:
        with self._lock:
            return list(self._problems)

    def check(self) -> list[str]:
        if self.api is None:
            return []
        from webhook.cluster.kube_json import RETRYABLE

        found: list[str] = []
        for group_version, plural, kind in CRDS:
            try:
                listed = self.api.request("GET", f"/apis/{group_version}", timeout=(3.0, 5.0))
            except RETRYABLE as exc:
                status = getattr(exc, "status", None)
                if status == 404:
                    found.append(f"CRD {plural}.{group_version.split('/')[0]} ({kind}) is not installed: "
                                 "install the chart's CRDs (charts/kgwe/crds)")
                    continue
                raise
            names = {r.get("name") for r in listed.get("resources") or [] if isinstance(r, dict)}
            if plural not in names:
                found.append(f"CRD {plural}.{group_version.split('/')[0]} ({kind}) is not installed: "
                             "install the chart's CRDs (charts/kgwe/crds)")
        for need in (*NEEDS, *self.extra_needs()):
            if not self._allowed(need):
                found.append(f"RBAC: KGWE's service account may not {need.described} ({need.why}); "
                             "grant it in KGWE's ClusterRole (charts/kgwe/templates)")
        with self._lock:
            changed = tuple(found) != self._problems
            self._problems = tuple(found)
        if changed and found:
            for line in found:
                log.error("controllers cannot work: %s", line)
        return found

    def _allowed(self, need: Need) -> bool:
        assert self.api is not None
        attributes = {"group": need.group, "resource": need.resource, "verb": need.verb,
                      "subresource": need.subresource}
        if need.namespaced:
            attributes["namespace"] = self.namespace
        body = {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
                "spec": {"resourceAttributes": attributes}}
        answer = self.api.request("POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", body=body,
                                  timeout=(3.0, 5.0))
        return bool((answer.get("status") or {}).get("allowed"))
