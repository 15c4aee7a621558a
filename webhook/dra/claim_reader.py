"""Reads the ResourceClaimTemplates and ResourceClaims a pod names, for `/validate` to judge what they ask.

In a cluster every read is a GET to the API server at admission (`get` on both kinds is in the chart's
DRA role), never the watch cache: a template deleted and created again with another request an instant
before the pod must not be judged by its old content. From a cluster directory, the directory's objects.

A read answers the claim spec (`ResourceClaimSpec`: a template's `spec.spec`, a claim's `spec`), None when
the object does not exist, and raises `ClaimReadError` when it cannot tell (timeout, forbidden, API
down): the caller refuses then, since a claim it cannot read may ask for GPUs.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from webhook.claim_names import object_name
from webhook.cluster.model import ClusterModel
from webhook.dra.claimed import ClaimRef
from webhook.dra.render import API_VERSION

log = logging.getLogger("kgwe.dra")
PLURALS = {"ResourceClaimTemplate": "resourceclaimtemplates", "ResourceClaim": "resourceclaims"}


class ClaimReadError(RuntimeError):
    pass


class ClaimReader(Protocol):
    @property
    def blocks_io(self) -> bool:
        """True when a read goes to the network (it then runs off the event loop)."""
        ...

    def read(self, namespace: str, ref: ClaimRef, model: ClusterModel, deadline: float | None) -> Any:
        """The claim spec `ref` names in `namespace`; None when it does not exist."""
        ...


def _claim_spec(kind: str, obj: Any) -> Any:
    spec = obj.get("spec") if isinstance(obj, dict) else None
    if kind == "ResourceClaimTemplate":
        return spec.get("spec") if isinstance(spec, dict) else None
    return spec


class ModelClaimReader:
    """The cluster directory's (or the watched) objects: `kgwe review`, `kgwe serve --cluster DIR`."""

    blocks_io = False

    def read(self, namespace: str, ref: ClaimRef, model: ClusterModel, deadline: float | None) -> Any:
        held = model.claim_templates if ref.kind == "ResourceClaimTemplate" else model.resource_claims
        obj = held.get(f"{namespace}/{ref.name}")
        return None if obj is None else (_claim_spec(ref.kind, obj) or {})


class KubeClaimReader:
    """GETs through the API server, each bounded by what is left of the admission deadline."""

    blocks_io = True

    def __init__(self, api: Any, connect_timeout: float = 1.0) -> None:
        self.api = api  # webhook.cluster.kube_json.KubeJson
        self.connect_timeout = connect_timeout

    def read(self, namespace: str, ref: ClaimRef, model: ClusterModel, deadline: float | None) -> Any:
        from kubernetes.client.exceptions import ApiException

        remaining = 10.0 if deadline is None else deadline - time.monotonic()
        what = f"{ref.kind} {namespace}/{ref.name}"
        if remaining <= 0:
            raise ClaimReadError(f"no time was left to read {what}")
        if object_name(namespace) is None or object_name(ref.name) is None:
            raise ClaimReadError(f"{what}: not an object name")
        path = f"/apis/{API_VERSION}/namespaces/{namespace}/{PLURALS[ref.kind]}/{ref.name}"
        try:
            obj = self.api.request("GET", path, timeout=(min(self.connect_timeout, remaining), remaining))
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise ClaimReadError(f"reading {what}: {exc.status} {exc.reason}") from exc
        except Exception as exc:  # urllib3 timeouts and connection errors
            raise ClaimReadError(f"reading {what}: {exc}") from exc
        return _claim_spec(ref.kind, obj) or {}


@dataclass
class ReadClaims:
    """What the claims a pod names ask (`(where, spec)` pairs), or why admission cannot tell."""

    specs: list[tuple[str, Any]] = field(default_factory=list)
    # Those of templates another controller writes (a gang's channel template, `ClaimRef.awaited`).
    awaited: list[tuple[str, Any]] = field(default_factory=list)
    refusal: str | None = None


def read_claims(
    reader: ClaimReader, namespace: str, refs: Iterable[ClaimRef], model: ClusterModel, deadline: float | None
) -> ReadClaims:
    """Every claim spec `refs` name, read in turn; the first that cannot be read or does not exist (unless it
    is awaited: its controller writes it after the admission, and usage reads its claim then) is the refusal."""
    read = ReadClaims()
    for ref in refs:
        what = f"spec.resourceClaims {ref.entry!r}: {ref.kind} {namespace}/{ref.name}"
        try:
            spec = reader.read(namespace, ref, model, deadline)
        except ClaimReadError as exc:
            log.warning("%s could not be read: %s", what, exc)
            read.refusal = f"{what} could not be read ({exc}); try again"
            return read
        if spec is None:
            if ref.awaited:
                continue
            read.refusal = f"{what} does not exist, so KGWE cannot tell what it asks for; create it before the pod"
            return read
        read.specs.append((what, spec))
        if ref.awaited:
            read.awaited.append((what, spec))
    return read
