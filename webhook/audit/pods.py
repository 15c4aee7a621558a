"""Whole pods for the policy audit.

In a cluster the model keeps pods slimmed (`webhook.cluster.slimming.slim_pod`: containers reduced
to name and resources), but policies read what was dropped: `securityContext`, `env`, images. The
audit therefore reads each pod it judges from the API, a bounded number per tick; placement and quota
checks keep using the model.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

from policies.vocabulary.objects import ObjectView

log = logging.getLogger("kgwe.audit")

# The whole pod for a pod of the model; None when the pod is gone.
PodReader = Callable[[dict[str, Any]], "dict[str, Any] | None"]


class ApiPodReader:
    """GET /api/v1/namespaces/{namespace}/pods/{name} through a kubernetes `ApiClient`."""

    def __init__(self, api_client: Any, timeout_seconds: float = 10.0) -> None:
        from webhook.cluster.kube_json import KubeJson

        self.api = KubeJson(api_client)
        self.timeout_seconds = timeout_seconds

    def __call__(self, pod: dict[str, Any]) -> dict[str, Any] | None:
        from kubernetes.client.exceptions import ApiException

        view = ObjectView(pod)
        namespace, name = view.namespace, view.name
        path = f"/api/v1/namespaces/{quote(namespace, safe='')}/pods/{quote(name, safe='')}"
        try:
            return self.api.request("GET", path, timeout=self.timeout_seconds)
        except ApiException as exc:
            if exc.status == 404:
                return None
            log.warning("reading pod %s/%s failed (%s): judging the cached copy", namespace, name, exc.status)
        except Exception as exc:  # connection errors: judge what the model has rather than nothing
            log.warning("reading pod %s/%s failed: %s; judging the cached copy", namespace, name, exc)
        return pod
