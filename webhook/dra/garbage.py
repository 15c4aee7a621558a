"""Removing the ResourceClaimTemplates and ComputeDomains KGWE created once no pod uses them.

An owner reference to the pod cannot be given: the webhook creates them while admitting the pod, before
the pod exists (and a template is shared by every pod of the namespace with the same request). So the
leader sweeps instead, every `interval` seconds:

- it lists KGWE's objects (label `app.kubernetes.io/managed-by: kgwe`, names `kgwe-...`; a kind whose
  API is not served, the ComputeDomain CRD without NVIDIA's driver, is skipped);
- an object is in use while an unfinished pod of its namespace names it (a template: in
  `spec.resourceClaims[].resourceClaimTemplateName`; a ComputeDomain: its IMEX channel template, which
  every member names), by the cluster model, so only once the model has listed the pods;
- an object unused at every sweep for `grace` seconds is deleted with the uid and resourceVersion it was
  seen with as preconditions: one changed or recreated meanwhile (409) is looked at again from scratch.
  The grace outlasts `templates.REMEMBER_SECONDS`, the time a replica skips creating a template it made,
  so no replica takes a deleted template for present;
- the deleted object is kept for `RESURRECT_SECONDS`: a pod admitted in the instant of the delete (its
  admission found the object still there) would name what is gone and wait for ever, so when such a pod
  shows up, the object is created again as it was.

Unused times live in the leader's memory: a new leader starts counting again, which only delays.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from policies.kernel.api_errors import api_exception
from policies.kernel.background import Task
from policies.vocabulary.objects import PodView
from webhook.cluster.model import ClusterModel, ClusterStore
from webhook.dra.compute_domain import API_VERSION as COMPUTE_DOMAIN_API
from webhook.dra.compute_domain import KIND as COMPUTE_DOMAIN
from webhook.dra.compute_domain import NAME_PREFIX as COMPUTE_DOMAIN_PREFIX
from webhook.dra.compute_domain import PLURAL as COMPUTE_DOMAINS
from webhook.dra.compute_domain import channel_template
from webhook.dra.render import API_VERSION as DRA_API
from webhook.dra.render import MANAGED_BY

log = logging.getLogger("kgwe.dra")

TEMPLATE = "ResourceClaimTemplate"
# kind -> (apiVersion, resource, the name prefix KGWE gives it).
SWEPT = {
    TEMPLATE: (DRA_API, "resourceclaimtemplates", "kgwe-"),
    COMPUTE_DOMAIN: (COMPUTE_DOMAIN_API, COMPUTE_DOMAINS, COMPUTE_DOMAIN_PREFIX),
}
SELECTOR = ",".join(f"{k}={v}" for k, v in MANAGED_BY.items())
RESURRECT_SECONDS = 300.0
# What the API server writes into an object that a create must not carry.
SERVER_FIELDS = ("uid", "resourceVersion", "creationTimestamp", "generation", "managedFields",
                 "deletionTimestamp", "deletionGracePeriodSeconds", "selfLink")

Key = tuple[str, str, str]  # kind, namespace, name


class Api(Protocol):
    def request(self, method: str, path: str, *, query: Iterable[tuple[str, str]] = (),
                body: dict[str, Any] | None = None, timeout: float | tuple[float, float] | None = None,
                ) -> dict[str, Any]: ...


@dataclass
class Unused:
    since: float
    uid: str
    resource_version: str


def names_in_use(model: ClusterModel) -> set[tuple[str, str]]:
    """(namespace, template name) of every template an unfinished pod names."""
    used: set[tuple[str, str]] = set()
    for pod in model.pods.values():
        view = PodView(pod)
        if view.terminal:
            continue
        for claim in view.resource_claims:
            template = claim.get("resourceClaimTemplateName")
            if isinstance(template, str):
                used.add((view.namespace, template))
    return used


def in_use(kind: str, obj: dict[str, Any], used: set[tuple[str, str]]) -> bool:
    meta = obj.get("metadata") or {}
    namespace, name = str(meta.get("namespace") or ""), str(meta.get("name") or "")
    if kind == COMPUTE_DOMAIN:
        try:
            name = channel_template(obj)
        except (KeyError, TypeError):
            return True  # not a domain as KGWE writes it: left alone
    return (namespace, name) in used


def _path(kind: str, namespace: str | None = None, name: str | None = None) -> str:
    api_version, plural, _prefix = SWEPT[kind]
    if namespace is None:
        return f"/apis/{api_version}/{plural}"
    return f"/apis/{api_version}/namespaces/{namespace}/{plural}" + (f"/{name}" if name else "")


class ClaimGarbageCollector:
    """The sweep (see the module docstring), a leader-only periodic task."""

    def __init__(
        self,
        store: ClusterStore,
        api: Api,
        *,
        grace_seconds: float,
        interval_seconds: float = 60.0,
        is_leader: Callable[[], bool] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store = store
        self.api = api
        self.grace = grace_seconds
        self.clock = clock
        self.unused: dict[Key, Unused] = {}
        self.deleted: dict[Key, tuple[float, dict[str, Any]]] = {}
        self.task = Task("dra-garbage", self.sweep, interval=interval_seconds, leader_only=True,
                         is_leader=is_leader, standby=self.forget)

    def forget(self) -> None:
        """A follower counts nothing: when it leads, it starts afresh."""
        self.unused.clear()
        self.deleted.clear()

    def sweep(self) -> None:
        if not self.store.loaded:
            return  # pods not listed yet: every object would look unused
        model = self.store.snapshot()
        used = names_in_use(model)
        now = self.clock()
        self._resurrect(used, now)
        seen: set[Key] = set()
        for kind in SWEPT:
            for obj in self._list(kind):
                meta = obj.get("metadata") or {}
                key = (kind, str(meta.get("namespace") or ""), str(meta.get("name") or ""))
                if not key[2].startswith(SWEPT[kind][2]) or in_use(kind, obj, used):
                    continue
                seen.add(key)
                uid, version = str(meta.get("uid") or ""), str(meta.get("resourceVersion") or "")
                entry = self.unused.get(key)
                if entry is None or entry.uid != uid:
                    self.unused[key] = Unused(now, uid, version)
                elif now - entry.since >= self.grace:
                    entry.resource_version = version
                    self._delete(key, obj, entry, now)
        for key in set(self.unused) - seen:
            del self.unused[key]

    def _list(self, kind: str) -> list[dict[str, Any]]:
        try:
            listed = self.api.request("GET", _path(kind), query=[("labelSelector", SELECTOR)])
        except api_exception() as exc:
            if exc.status in (403, 404):  # not served here (no such CRD) or not granted: nothing to sweep
                return []
            raise
        items = listed.get("items")
        return [i for i in items if isinstance(i, dict)] if isinstance(items, list) else []

    def _delete(self, key: Key, obj: dict[str, Any], entry: Unused, now: float) -> None:
        kind, namespace, name = key
        options = {"apiVersion": "v1", "kind": "DeleteOptions",
                   "preconditions": {"uid": entry.uid, "resourceVersion": entry.resource_version}}
        try:
            self.api.request("DELETE", _path(kind, namespace, name), body=options)
        except api_exception() as exc:
            if exc.status not in (404, 409):
                raise
            # Gone already, or changed or recreated since it was listed: judged again from scratch.
            self.unused.pop(key, None)
            return
        del self.unused[key]
        self.deleted[key] = (now, obj)
        log.info("deleted %s %s/%s: no unfinished pod named it for %.0fs", kind, namespace, name, self.grace)

    def _resurrect(self, used: set[tuple[str, str]], now: float) -> None:
        for key, (when, obj) in list(self.deleted.items()):
            if now - when > RESURRECT_SECONDS:
                del self.deleted[key]
            elif in_use(key[0], obj, used):
                self._create_again(key, obj)
                del self.deleted[key]

    def _create_again(self, key: Key, obj: dict[str, Any]) -> None:
        kind, namespace, name = key
        api_version = SWEPT[kind][0]
        meta = {k: v for k, v in (obj.get("metadata") or {}).items() if k not in SERVER_FIELDS}
        body = {**obj, "apiVersion": api_version, "kind": kind, "metadata": meta}
        body.pop("status", None)
        try:
            self.api.request("POST", _path(kind, namespace), body=body)
        except api_exception() as exc:
            if exc.status != 409:  # 409: created again meanwhile, by an admission that needed it
                raise
        log.warning("created %s %s/%s again: a pod admitted as it was deleted names it", kind, namespace, name)
