"""Where audit reports go: the Kubernetes API in a cluster, a list in memory elsewhere (tests, `kgwe audit`)."""

from __future__ import annotations

import copy
import logging
from typing import Any, Protocol

from policies.vocabulary.objects import ObjectView
from webhook.audit.reports import GROUP, VERSION, report_key

log = logging.getLogger("kgwe.audit")

PLURALS = {"PolicyReport": "policyreports", "ClusterPolicyReport": "clusterpolicyreports"}


class ReportWriter(Protocol):
    def write(self, report: dict[str, Any]) -> None:
        """Create the report, or replace the one of the same kind, namespace and name."""


class MemoryReportWriter:
    """Keeps the latest version of every report, and every write in order."""

    def __init__(self) -> None:
        self.reports: dict[tuple[str, str, str], dict[str, Any]] = {}
        self.writes: list[dict[str, Any]] = []

    def write(self, report: dict[str, Any]) -> None:
        stored = copy.deepcopy(report)
        self.reports[report_key(report)] = stored
        self.writes.append(stored)


class KubeReportWriter:
    """Writes through `kubernetes.client.CustomObjectsApi`: create, and on 409 Conflict replace.

    When the PolicyReport CRDs are not installed (404), reports are skipped (logged once): the audit
    still runs and its metric still counts.
    """

    def __init__(self, custom_objects_api: Any) -> None:
        self.api = custom_objects_api
        self._missing_crds: set[str] = set()

    def write(self, report: dict[str, Any]) -> None:
        from kubernetes.client.exceptions import ApiException

        kind, namespace, name = report_key(report)
        plural = PLURALS[kind]
        if plural in self._missing_crds:
            return
        try:
            self._create(plural, namespace, report)
        except ApiException as exc:
            if exc.status == 404:
                log.warning("%s.%s is not installed: audit reports are not written", plural, GROUP)
                self._missing_crds.add(plural)
                return
            if exc.status != 409:
                raise
            current = self._get(plural, namespace, name)
            body = copy.deepcopy(report)
            body["metadata"]["resourceVersion"] = ObjectView(current).resource_version or None
            self._replace(plural, namespace, name, body)

    def _create(self, plural: str, namespace: str, body: dict[str, Any]) -> Any:
        if namespace:
            return self.api.create_namespaced_custom_object(GROUP, VERSION, namespace, plural, body)
        return self.api.create_cluster_custom_object(GROUP, VERSION, plural, body)

    def _get(self, plural: str, namespace: str, name: str) -> dict[str, Any]:
        if namespace:
            found = self.api.get_namespaced_custom_object(GROUP, VERSION, namespace, plural, name)
        else:
            found = self.api.get_cluster_custom_object(GROUP, VERSION, plural, name)
        return found if isinstance(found, dict) else {}

    def _replace(self, plural: str, namespace: str, name: str, body: dict[str, Any]) -> Any:
        if namespace:
            return self.api.replace_namespaced_custom_object(GROUP, VERSION, namespace, plural, name, body)
        return self.api.replace_cluster_custom_object(GROUP, VERSION, plural, name, body)
