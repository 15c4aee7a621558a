"""The store contract for every record KGWE keeps: one API object, read whole and written by compare-and-swap.

KGWE keeps its state in the Kubernetes API, never in a replica (the gang ledger, the leader Lease, the MIG
manager's ConfigMap): any replica may write, so every write carries the `resourceVersion` it was planned
against and the API server refuses a stale one. The contract, for a record of type T:

- `read()` -> `Versioned(value, version)`; an object that does not exist reads as `decode(None)` with
  version "" (writing at version "" creates it).
- `write(value, version)` -> the new version, or `Conflict` when someone wrote first: 409 Conflict on a
  replace, 409 AlreadyExists on a create, 404 on a replace (deleted since it was read). The caller reads
  again and plans again; nothing was written.
- `Unavailable` for anything else (another status, a connection error, a timeout), with the HTTP status
  when there is one. Every call is bounded (`DEFAULT_TIMEOUT` unless the caller gives its own) and made
  once: the caller's loop decides whether to try again.

A write sends the object last read at that version with the new value encoded into it (`Codec.encode`), so
fields KGWE does not own (labels, other keys of a ConfigMap) survive; the API server's managedFields are
dropped (it keeps them on a replace that omits them). Requests go through `JsonApi`, which the webhook's raw
JSON client (webhook/cluster/kube_json.py `KubeJson`) is: the kernel imports nothing of the webhook.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from policies.kernel.api_errors import api_exception

if TYPE_CHECKING:
    from kubernetes.client.exceptions import ApiException

T = TypeVar("T")
Timeout = float | tuple[float, float]
# (connect, read) seconds: an API server that stops answering costs a writer a round, not its thread.
DEFAULT_TIMEOUT: Timeout = (5.0, 10.0)
# What a call to the API server fails with besides a status (ValueError: a body that is not JSON).


class JsonApi(Protocol):
    """Raw JSON requests to the API server; a non-2xx answer raises `ApiException`."""

    def request(self, method: str, path: str, *, query: Iterable[tuple[str, str]] = (),
                body: dict[str, Any] | None = None, content_type: str = "application/json",
                timeout: Timeout | None = None) -> dict[str, Any]: ...


class Conflict(Exception):
    """Someone wrote the record since it was read: nothing was written; read again."""


class Unavailable(Exception):
    """The record could not be read or written (`status`: the HTTP status, None when none came back)."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Versioned(Generic[T]):
    value: T
    version: str  # the object's resourceVersion; "": it does not exist


@dataclass(frozen=True)
class ObjectPlace:
    """Where the record's object lives: its collection's path, its name, what it is."""

    collection: str  # /api/v1/namespaces/{ns}/configmaps, /apis/kgwe.io/v1alpha1/gangledgers, ...
    name: str
    api_version: str
    kind: str
    namespace: str | None = None

    @property
    def path(self) -> str:
        return f"{self.collection}/{self.name}"

    def skeleton(self) -> dict[str, Any]:
        """A new object of this place, before the value is encoded into it."""
        metadata: dict[str, Any] = {"name": self.name}
        if self.namespace is not None:
            metadata["namespace"] = self.namespace
        return {"apiVersion": self.api_version, "kind": self.kind, "metadata": metadata}

    def describe(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name}" if self.namespace else f"{self.kind} {self.name}"


@dataclass(frozen=True)
class Codec(Generic[T]):
    """The record's value in its object: `decode` reads it (None: no object), `encode` writes it into the object to
    store (the one read, else the place's skeleton) and returns it. `encode` replaces the top-level fields it
    owns and never edits a part of the object read in place: that object is shared with the store's memory."""

    decode: Callable[[dict[str, Any] | None], T]
    encode: Callable[[T, dict[str, Any]], dict[str, Any]]


class RecordStore(Generic[T]):
    """One record of type T in one API object, with compare-and-swap on its resourceVersion."""

    def __init__(self, api: JsonApi, place: ObjectPlace, codec: Codec[T], *,
                 timeout: Timeout = DEFAULT_TIMEOUT, query: Iterable[tuple[str, str]] = ()) -> None:
        """`query`: sent with every write (a fieldManager)."""
        self.api = api
        self.place = place
        self.codec = codec
        self.timeout = timeout
        self.query = tuple(query)
        self._last: dict[str, Any] | None = None  # the object last read: the base of a write at its version
        self._lock = threading.Lock()

    def read(self, *, timeout: Timeout | None = None) -> Versioned[T]:
        api_error, transport = _api_errors()
        try:
            obj: dict[str, Any] | None = self.api.request("GET", self.place.path, timeout=timeout or self.timeout)
        except api_error as exc:
            if exc.status != 404:
                raise self._unavailable("reading", exc) from exc
            obj = None
        except transport as exc:
            raise self._unavailable("reading", exc) from exc
        with self._lock:
            self._last = obj
        return Versioned(self.codec.decode(obj), _version(obj))

    def write(self, value: T, version: str, *, timeout: Timeout | None = None) -> str:
        """Store `value` if the object is still at `version` ("": if it does not exist); the new version."""
        body = self.codec.encode(value, self._base(version))
        meta = body.setdefault("metadata", {})
        meta.pop("managedFields", None)
        if version:
            meta["resourceVersion"] = version
        else:
            meta.pop("resourceVersion", None)
        api_error, transport = _api_errors()
        try:
            if version:
                stored = self.api.request("PUT", self.place.path, body=body, query=self.query,
                                          timeout=timeout or self.timeout)
            else:
                stored = self.api.request("POST", self.place.collection, body=body, query=self.query,
                                          timeout=timeout or self.timeout)
        except api_error as exc:
            if exc.status == 409 or (exc.status == 404 and version):
                raise Conflict(f"{self.place.describe()}: written or deleted since version {version!r}") from exc
            raise self._unavailable("writing", exc) from exc
        except transport as exc:
            raise self._unavailable("writing", exc) from exc
        return _version(stored)

    def _base(self, version: str) -> dict[str, Any]:
        with self._lock:
            last = self._last
        if last is not None and version and _version(last) == version:
            # The codec replaces fields and the store edits metadata: only metadata need be a copy (a whole
            # deep copy of a 2000-record ledger was a fifth of its round, docs/performance.md).
            return {**last, "metadata": copy.deepcopy(last.get("metadata") or {})}
        return self.place.skeleton()

    def _unavailable(self, doing: str, exc: Exception) -> Unavailable:
        if isinstance(exc, api_exception()):
            return Unavailable(f"{self.place.describe()}: {doing} failed: HTTP {exc.status}", exc.status)
        return Unavailable(f"{self.place.describe()}: {doing} failed: {exc}")


def _api_errors() -> tuple[type[ApiException], tuple[type[Exception], ...]]:
    """The API server's error answer, and the transport's errors (the connection, a body that is not JSON),
    imported where a store first talks to the API server (api_errors.py: `kgwe review` imports the stores'
    owners without ever writing, and urllib3 is a tenth of a CPU-second more)."""
    import urllib3

    return api_exception(), (urllib3.exceptions.HTTPError, OSError, ValueError)


def _version(obj: dict[str, Any] | None) -> str:
    meta = (obj or {}).get("metadata")
    return str(meta.get("resourceVersion") or "") if isinstance(meta, dict) else ""
