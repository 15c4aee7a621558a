"""Keep the API server's ValidatingAdmissionPolicies in step with the qualifying CEL GPUPolicies
(`policies.generateAdmissionPolicies`), on the leader, every `interval` seconds.

What is written is labelled `app.kubernetes.io/managed-by: kgwe` and named `kgwe-gpupolicy-...`; only such
objects are changed or deleted. Each carries the hash of what KGWE wrote (`kgwe.io/generated-hash`):
the API server fills in defaults, so comparing specs would rewrite every object on every pass. A
GPUPolicy that does not compile keeps what was generated from its last good version, as KGWE keeps
serving that version; one that goes, or stops qualifying, loses its policy and binding (the binding
first, so no policy is left bound to nothing). Updates and deletes carry the resourceVersion (and uid)
they were decided on: one changed meanwhile is redone on the next pass.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol

import orjson
from kubernetes.client.exceptions import ApiException

from policies.kernel.background import Task
from webhook.cluster.model import ClusterStore
from webhook.vap.translate import (
    API_VERSION,
    BINDING_KIND,
    MANAGED_BY,
    NAME_PREFIX,
    POLICY_KIND,
    generated_name,
    translate,
)

log = logging.getLogger("kgwe.vap")

PLURALS = {POLICY_KIND: "validatingadmissionpolicies", BINDING_KIND: "validatingadmissionpolicybindings"}
SELECTOR = ",".join(f"{k}={v}" for k, v in MANAGED_BY.items())
HASH_ANNOTATION = "kgwe.io/generated-hash"


class Api(Protocol):
    def request(self, method: str, path: str, *, query: Iterable[tuple[str, str]] = (),
                body: dict[str, Any] | None = None, timeout: float | tuple[float, float] | None = None,
                ) -> dict[str, Any]: ...


def _path(kind: str, name: str | None = None) -> str:
    return f"/apis/{API_VERSION}/{PLURALS[kind]}" + (f"/{name}" if name else "")


def _hashed(obj: dict[str, Any]) -> dict[str, Any]:
    """`obj` with the hash of its content in an annotation."""
    digest = hashlib.sha256(orjson.dumps(obj, option=orjson.OPT_SORT_KEYS)).hexdigest()[:32]
    meta = obj["metadata"]
    return {**obj, "metadata": {**meta, "annotations": {**(meta.get("annotations") or {}), HASH_ANNOTATION: digest}}}


class AdmissionPolicySync:
    """The `admission-policies` task (see the module docstring)."""

    def __init__(
        self,
        store: ClusterStore,
        api: Api,
        *,
        excluded_namespaces: Sequence[str],
        refused: Callable[[], set[str]] = set,
        interval_seconds: float = 10.0,
        is_leader: Callable[[], bool] | None = None,
    ) -> None:
        self.store = store
        self.api = api
        self.excluded = list(excluded_namespaces)
        self.refused = refused  # GPUPolicies that do not compile now (a last good version may serve)
        self.not_generated: dict[str, str] = {}  # GPUPolicy -> why it has no admission policy
        self.task = Task("admission-policies", self.sync, interval=interval_seconds, leader_only=True,
                         is_leader=is_leader)

    def wanted(self) -> tuple[dict[tuple[str, str], dict[str, Any]], set[str]]:
        """(what should exist by (kind, name), names to leave as they are)."""
        wanted: dict[tuple[str, str], dict[str, Any]] = {}
        keep: set[str] = set()
        refused = self.refused()
        why: dict[str, str] = {}
        for name, obj in sorted(self.store.snapshot().gpu_policies.items()):
            if name in refused:
                keep.add(generated_name(name))
                continue
            try:
                generated = translate(obj, excluded_namespaces=self.excluded)
            except (ValueError, KeyError, TypeError) as exc:
                why[name] = str(exc)
                continue
            wanted[(POLICY_KIND, generated.name)] = _hashed(generated.policy)
            wanted[(BINDING_KIND, generated.name)] = _hashed(generated.binding)
        for name, reason in why.items():
            if self.not_generated.get(name) != reason:
                log.info("GPUPolicy %s is not held by the API server: %s", name, reason)
        self.not_generated = why
        return wanted, keep

    def sync(self) -> None:
        if not self.store.loaded:
            return  # the GPUPolicies are not listed yet: everything would look gone
        wanted, keep = self.wanted()
        existing: dict[tuple[str, str], dict[str, Any]] = {}
        for kind in (POLICY_KIND, BINDING_KIND):
            listed = self.api.request("GET", _path(kind), query=[("labelSelector", SELECTOR)])
            for obj in listed.get("items") or []:
                name = str((obj.get("metadata") or {}).get("name") or "")
                if name.startswith(NAME_PREFIX):
                    existing[(kind, name)] = obj
        for key, obj in wanted.items():  # policies before their bindings
            self._write(key, obj, existing.get(key))
        for kind in (BINDING_KIND, POLICY_KIND):  # bindings before their policies
            for key, obj in existing.items():
                if key[0] == kind and key not in wanted and key[1] not in keep:
                    self._delete(key, obj)

    def _write(self, key: tuple[str, str], obj: dict[str, Any], current: dict[str, Any] | None) -> None:
        kind, name = key
        try:
            if current is None:
                self.api.request("POST", _path(kind), body=obj)
                log.info("created %s %s", kind, name)
                return
            meta = current.get("metadata") or {}
            if (meta.get("annotations") or {}).get(HASH_ANNOTATION) == obj["metadata"]["annotations"][HASH_ANNOTATION]:
                return
            body = {**obj, "metadata": {**obj["metadata"], "resourceVersion": meta.get("resourceVersion")}}
            self.api.request("PUT", _path(kind, name), body=body)
            log.info("updated %s %s", kind, name)
        except ApiException as exc:
            if exc.status in (400, 422):  # the API server's own checks refuse it (its CEL library, its costs)
                log.warning("%s %s refused by the API server: %s", kind, name, str(exc.body)[:512])
                self.not_generated[name] = f"the API server refused it: {exc.status} {exc.reason}"
                return
            if exc.status != 409:  # 409: created or changed meanwhile; the next pass sees it
                raise

    def _delete(self, key: tuple[str, str], obj: dict[str, Any]) -> None:
        kind, name = key
        meta = obj.get("metadata") or {}
        options = {"apiVersion": "v1", "kind": "DeleteOptions",
                   "preconditions": {"uid": meta.get("uid"), "resourceVersion": meta.get("resourceVersion")}}
        try:
            self.api.request("DELETE", _path(kind, name), body=options)
            log.info("deleted %s %s: its GPUPolicy is gone or no longer qualifies", kind, name)
        except ApiException as exc:
            if exc.status not in (404, 409):
                raise
