"""What the quota controller writes to the cluster: a released pod's patch, a waiting pod's condition and
Event, a TenantQuota's status; `kube_quota_writer` writes them through the API server."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Protocol

from policies.vocabulary.objects import PodView
from webhook.quotas.scheduling_gate import QUOTA_CONDITION

FIELD_MANAGER = "kgwe-controller"
# API calls of a pass stay well inside the lease's margin: a leader that lost its lease stops writing before
# another replica may start (webhook/controllers/leader.py: renew deadline 10 s, lease 15 s).
CALL_TIMEOUT = (3.0, 4.0)


class QuotaWriter(Protocol):
    """What the controller changes in the cluster."""

    def release(self, pod: dict[str, Any], patch: dict[str, Any]) -> None:
        """Apply the merge patch that pins and ungates the pod (it carries the resourceVersion read)."""

    def waiting(self, pod: dict[str, Any], message: str, *, event: bool = True) -> None:
        """Set the pod's `kgwe.io/QuotaAvailable` condition to False with `message`; with `event`, post an Event."""

    def status(self, quota: str, status: dict[str, Any]) -> None:
        """Write a TenantQuota's `status`."""


def kube_quota_writer(api_client: Any) -> QuotaWriter:
    from webhook.cluster.kube_json import KubeJson

    return _KubeQuotaWriter(KubeJson(api_client))


class _KubeQuotaWriter:
    def __init__(self, api: Any) -> None:
        self.api = api

    def release(self, pod: dict[str, Any], patch: dict[str, Any]) -> None:
        view = PodView(pod)
        self.api.request(
            "PATCH", f"/api/v1/namespaces/{view.namespace}/pods/{view.name}",
            query=[("fieldManager", FIELD_MANAGER)], body=patch,
            content_type="application/merge-patch+json", timeout=CALL_TIMEOUT,
        )

    def waiting(self, pod: dict[str, Any], message: str, *, event: bool = True) -> None:
        view = PodView(pod)
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        condition = {"type": QUOTA_CONDITION, "status": "False", "reason": "WaitingForQuota",
                     "message": message[:1024], "lastTransitionTime": now}
        # Strategic merge: conditions merge by type, so the kubelet's and the scheduler's stay as they are.
        self.api.request(
            "PATCH", f"/api/v1/namespaces/{view.namespace}/pods/{view.name}/status",
            query=[("fieldManager", FIELD_MANAGER)], body={"status": {"conditions": [condition]}},
            content_type="application/strategic-merge-patch+json", timeout=CALL_TIMEOUT,
        )
        if not event:
            return
        self.api.request(
            "POST", f"/api/v1/namespaces/{view.namespace}/events",
            body={
                "apiVersion": "v1", "kind": "Event",
                "metadata": {"generateName": f"{view.name}.", "namespace": view.namespace},
                "involvedObject": {"kind": "Pod", "apiVersion": "v1", "namespace": view.namespace,
                                   "name": view.name, "uid": view.uid},
                "reason": "WaitingForQuota", "message": message[:1024], "type": "Normal",
                "source": {"component": "kgwe"}, "firstTimestamp": now, "lastTimestamp": now, "count": 1,
            },
            timeout=CALL_TIMEOUT,
        )

    def status(self, quota: str, status: dict[str, Any]) -> None:
        self.api.request(
            "PATCH", f"/apis/kgwe.io/v1alpha1/tenantquotas/{quota}/status",
            query=[("fieldManager", FIELD_MANAGER)], body={"status": status},
            content_type="application/merge-patch+json", timeout=CALL_TIMEOUT,
        )
