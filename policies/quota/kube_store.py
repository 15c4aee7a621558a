"""QuotaStore on the API server: reservations in the TenantQuota's `status` subresource.

Optimistic concurrency: the write sends the object back with the `metadata.resourceVersion` it was read
with, so the API server answers 409 Conflict when another replica wrote in between; that is the store
contract's "version changed" (False), and the caller reads again.
"""

from __future__ import annotations

import copy
import threading
from typing import Any

from kubernetes.client import CustomObjectsApi
from kubernetes.client.exceptions import ApiException

from policies.kube_client import deadline_api_client
from policies.quota.store import (
    QuotaNotFound,
    QuotaStatus,
    QuotaUnavailable,
    Versioned,
    status_from_json,
    status_to_json,
)
from policies.vocabulary import keys
from policies.vocabulary.objects import ObjectView

GROUP = keys.GROUP
VERSION = "v1alpha1"
PLURAL = "tenantquotas"
CONFLICT = 409
NOT_FOUND = 404


class KubeQuotaStore:
    def __init__(self, api: CustomObjectsApi | None = None) -> None:
        """`api` should be built on policies.kube_client.deadline_api_client so that timeouts hold."""
        self.api = api if api is not None else CustomObjectsApi(deadline_api_client())
        # The object as last read, per quota: written back whole so that only `status` changes.
        self._last_read: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()

    def read(self, quota: str, *, timeout: float | None = None) -> Versioned:
        try:
            obj = self.api.get_cluster_custom_object_status(GROUP, VERSION, PLURAL, quota, _request_timeout=timeout)
        except ApiException as exc:
            if exc.status == NOT_FOUND:
                raise QuotaNotFound(f"TenantQuota {quota} not found (deleted while in use?)") from exc
            raise QuotaUnavailable(f"TenantQuota {quota}: reading status failed: HTTP {exc.status}") from exc
        except Exception as exc:  # connection errors, timeouts: urllib3 raises many kinds
            raise QuotaUnavailable(f"TenantQuota {quota}: reading status failed: {exc}") from exc
        if not isinstance(obj, dict):
            raise QuotaUnavailable(f"TenantQuota {quota}: the API server answered with {type(obj).__name__}")
        version = ObjectView(obj).resource_version
        with self._lock:
            self._last_read[quota] = obj
        return Versioned(status_from_json(obj.get("status")), version)

    def write(self, quota: str, status: QuotaStatus, version: str, *, timeout: float | None = None) -> bool:
        body = self._body(quota, status, version)
        try:
            self.api.replace_cluster_custom_object_status(
                GROUP, VERSION, PLURAL, quota, body, _request_timeout=timeout
            )
        except ApiException as exc:
            if exc.status == CONFLICT:
                return False
            if exc.status == NOT_FOUND:
                raise QuotaNotFound(f"TenantQuota {quota} not found (deleted while in use?)") from exc
            raise QuotaUnavailable(f"TenantQuota {quota}: writing status failed: HTTP {exc.status}") from exc
        except Exception as exc:
            raise QuotaUnavailable(f"TenantQuota {quota}: writing status failed: {exc}") from exc
        return True

    def _body(self, quota: str, status: QuotaStatus, version: str) -> dict[str, Any]:
        with self._lock:
            last = self._last_read.get(quota)
        if last is not None and version and ObjectView(last).resource_version == version:
            body = copy.deepcopy(last)
        else:
            body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "TenantQuota", "metadata": {"name": quota}}
        body["metadata"]["resourceVersion"] = version
        # Fields of the status that other writers own (conditions, ...) are kept as they were.
        body["status"] = {**(body.get("status") or {}), **status_to_json(status)}
        return body
