"""The writer of native gang scheduling (native.py): a gang's Workload and PodGroup created over the API by the
leader's gang controller. Apart from the names and objects in native.py so that admission, which only names
the PodGroup, loads no API client."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from kubernetes.client.exceptions import ApiException
from prometheus_client import Counter

from policies.vocabulary.objects import ObjectView
from webhook.cluster.kube_json import RETRYABLE, KubeJson
from webhook.gangs.native import (
    GROUP_VERSION,
    KINDS,
    PODGROUPS,
    WORKLOADS,
    pod_group_object,
    pod_group_suits,
    workload_object,
    workload_suits,
)

log = logging.getLogger("kgwe.gangs.native")

TIMEOUT = (10.0, 30.0)

CREATED = Counter("kgwe_gang_workload_objects_created_total",
                  "Workloads and PodGroups KGWE created for gangs (native gang scheduling)", ["kind"])


class NativeGangWriter:
    """Creates a gang's Workload and PodGroup, idempotently, over the API (the leader's gang controller)."""

    def __init__(self, api: KubeJson) -> None:
        self.api = api

    def ensure(self, namespace: str, gang: str, min_count: int, room_key: str,
               members: Sequence[Mapping[str, Any]]) -> bool:
        """The gang's Workload, then its PodGroup, exist and suit it (`min_count`, the room's key); owner
        references follow the live members. False (logged) when the API server did not let it be so: the release
        waits for the next pass, gated, rather than start pods that wait on a PodGroup that is not there."""
        try:
            self._ensure(WORKLOADS, workload_object(namespace, gang, min_count, room_key, members),
                         lambda current: workload_suits(current, min_count, room_key))
            self._ensure(PODGROUPS, pod_group_object(namespace, gang, min_count, room_key, members),
                         lambda current: pod_group_suits(current, min_count, room_key))
        except RETRYABLE as exc:
            status = getattr(exc, "status", None)
            log.warning("gang %s/%s: its Workload and PodGroup could not be made ready (%s); it stays gated",
                        namespace, gang, f"HTTP {status}" if status else exc)
            return False
        return True

    def _ensure(self, plural: str, body: dict[str, Any], suits: Callable[[Mapping[str, Any]], bool]) -> None:
        meta = body["metadata"]
        collection = f"/apis/{GROUP_VERSION}/namespaces/{meta['namespace']}/{plural}"
        path = f"{collection}/{meta['name']}"
        for _attempt in range(2):
            try:
                self.api.request("POST", collection, body=body, timeout=TIMEOUT)
                CREATED.labels(kind=KINDS[plural]).inc()
                log.info("%s %s/%s created", KINDS[plural], meta["namespace"], meta["name"])
                return
            except ApiException as exc:
                if exc.status != 409:
                    raise
            current = self.api.request("GET", path, timeout=TIMEOUT)
            if suits(current):
                self._follow_owners(path, current, meta.get("ownerReferences") or [])
                return
            # Another run of the gang left it (another size, another room kind): the spec is immutable, so it is
            # replaced; "a group object with the same name may be recreated with different policies" (core/v1).
            log.info("%s %s/%s does not suit the gang now: replaced", KINDS[plural], meta["namespace"], meta["name"])
            try:
                self.api.request("DELETE", path, body={"apiVersion": "v1", "kind": "DeleteOptions",
                                                       "preconditions": {"uid": ObjectView(current).uid}},
                                 timeout=TIMEOUT)
            except ApiException as exc:
                if exc.status != 404:
                    raise
        raise ApiException(status=409, reason=f"{KINDS[plural]} {meta['name']} is still being replaced")

    def _follow_owners(self, path: str, current: Mapping[str, Any], owners: list[dict[str, Any]]) -> None:
        """Owner references to the live members' owners: a new run (new Jobs) keeps the object alive, and it goes
        with the last of them."""
        view = ObjectView(current)
        if not owners or {str(o.get("uid")) for o in view.owner_references} == {o["uid"] for o in owners}:
            return
        self.api.request("PATCH", path, body={"metadata": {"resourceVersion": view.resource_version,
                                                           "ownerReferences": owners}},
                         content_type="application/merge-patch+json", timeout=TIMEOUT)
