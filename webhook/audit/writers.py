"""Where audit reports go: the Kubernetes API in a cluster, a list in memory elsewhere (tests, `kgwe audit`)."""

from __future__ import annotations

import copy
import logging
from typing import Any, Protocol

from policies.vocabulary.objects import ObjectView
from webhook.audit.formats import BY_API_VERSION
from webhook.audit.reports import report_key

log = logging.getLogger("kgwe.audit")


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

    The group, version and plural come from the report's own apiVersion and kind (OpenReports or
    wgpolicyk8s, webhook/audit/formats.py). When the format's CRDs are not installed (404), its reports are
    skipped (logged once): the audit still runs and its metric still counts.
    """

    def __init__(self, custom_objects_api: Any) -> None:
        self.api = custom_objects_api
        self._missing_crds: set[tuple[str, str, str]] = set()

    def write(self, report: dict[str, Any]) -> None:
        from kubernetes.client.exceptions import ApiException

        kind, namespace, name = report_key(report)
        fmt = BY_API_VERSION[ObjectView(report).api_version]
        where = (fmt.group, fmt.version, fmt.plural(kind))
        if where in self._missing_crds:
            return
        try:
            self._create(where, namespace, report)
        except ApiException as exc:
            if exc.status == 404:
                log.warning("%s.%s is not installed: audit reports are not written", where[2], where[0])
                self._missing_crds.add(where)
                return
            if exc.status != 409:
                raise
            current = self._get(where, namespace, name)
            body = copy.deepcopy(report)
            body["metadata"]["resourceVersion"] = ObjectView(current).resource_version or None
            self._replace(where, namespace, name, body)

    def _create(self, where: tuple[str, str, str], namespace: str, body: dict[str, Any]) -> Any:
        group, version, plural = where
        if namespace:
            return self.api.create_namespaced_custom_object(group, version, namespace, plural, body)
        return self.api.create_cluster_custom_object(group, version, plural, body)

    def _get(self, where: tuple[str, str, str], namespace: str, name: str) -> dict[str, Any]:
        group, version, plural = where
        if namespace:
            found = self.api.get_namespaced_custom_object(group, version, namespace, plural, name)
        else:
            found = self.api.get_cluster_custom_object(group, version, plural, name)
        return found if isinstance(found, dict) else {}

    def _replace(self, where: tuple[str, str, str], namespace: str, name: str, body: dict[str, Any]) -> Any:
        group, version, plural = where
        if namespace:
            return self.api.replace_namespaced_custom_object(group, version, namespace, plural, name, body)
        return self.api.replace_cluster_custom_object(group, version, plural, name, body)
