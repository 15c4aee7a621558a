"""Gang records: which room each unbound gang was promised, kept in the Kubernetes API for every replica.

Records are written by the leader's gang controller only (webhook/gangs/controller.py), from the pods that
exist; no admission request writes one. They live in one object so that choosing a room and promising it
is one compare-and-swap: two writers (replicas that both believed they led, during a handover) both read
version V, both write, and the second write fails and is planned again against the first's promises, so
two gangs never get the same room.

The store contract: `read()` returns the records and an opaque version; `write(records, version)` stores
them only if the version is still the one read and returns True, else writes nothing and returns False.
Failures to reach the store raise `GangStoreUnavailable`. The product's one store is `KubeGangStore`: the
cluster-scoped `GangLedger` object named `kgwe-gangs`, kept by the kernel's record store
(policies/kernel/records.py): written with its `resourceVersion`, so the API server answers 409 to the loser
of a race. Tests run it against a fake API server (tests/gangs/gang_support.py). A YAML cluster directory
keeps no records: its views plan them from the directory's pods on every call (webhook/gangs/planning.py,
`planned_records`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from policies.kernel.records import Codec, Conflict, JsonApi, ObjectPlace, RecordStore, Unavailable
from policies.vocabulary import keys
from policies.vocabulary.objects import ObjectView
from webhook.intent import MAX_GANG_SIZE
from webhook.placement.rooms import RoomId

GROUP = keys.GROUP
VERSION = "v1alpha1"
PLURAL = "gangledgers"
KIND = "GangLedger"
LEDGER_NAME = "kgwe-gangs"
# One API object holds every record: bounded so it stays far below etcd's object size limit.
MAX_RECORDS = 2000


class GangStoreUnavailable(RuntimeError):
    """The gang store could not be read or written in time."""


@dataclass(frozen=True)
class GangRecord:
    """One gang's promise and what the controller last saw of it."""

    namespace: str
    gang: str
    size: int
    gpus_per_pod: int
    types: tuple[str, ...]
    room: RoomId | None  # None: no room had space when the gang was last planned
    created_at: float  # seconds since the epoch (replicas share wall-clock time, not monotonic time)
    released_at: float | None = None  # the gates were removed (pinned to `room`) at this time
    # The newest creationTimestamp (the API server's clock) of the members the release was decided for: a
    # gated pod created later belongs to a new run of the gang, which the release does not cover.
    released_upto: str | None = None
    expired: bool = False  # an incomplete gang waited past the timeout: its promise no longer counts
    reason: str = ""  # why the gang waits, in words (empty once released)
    short_gpus: int = 0
    warned: bool = False  # the waiting Event was sent for the current wait

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.gang}"

    @property
    def promising(self) -> bool:
        """The record holds capacity in its room for members not yet bound."""
        return self.room is not None and not self.expired

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "namespace": self.namespace,
            "gang": self.gang,
            "size": self.size,
            "gpusPerPod": self.gpus_per_pod,
            "types": list(self.types),
            "createdAt": self.created_at,
        }
        if self.room is not None:
            out["room"] = self.room.as_json()
        if self.released_at is not None:
            out["releasedAt"] = self.released_at
        if self.released_upto is not None:
            out["releasedUpTo"] = self.released_upto
        if self.expired:
            out["expired"] = True
        if self.reason:
            out["reason"] = self.reason
        if self.short_gpus:
            out["shortGPUs"] = self.short_gpus
        if self.warned:
            out["warned"] = True
        return out

    @classmethod
    def from_json(cls, raw: Any) -> GangRecord | None:
        """A record from stored JSON; None for an entry that is not one (never trusted blindly)."""
        if not isinstance(raw, dict):
            return None
        try:
            size = int(raw["size"])
            gpus = int(raw.get("gpusPerPod") or 0)
            record = cls(
                namespace=str(raw["namespace"]),
                gang=str(raw["gang"]),
                size=size,
                gpus_per_pod=gpus,
                types=tuple(str(t) for t in raw.get("types") or ())[:32],
                room=RoomId.from_json(raw.get("room")),
                created_at=float(raw["createdAt"]),
                released_at=float(raw["releasedAt"]) if raw.get("releasedAt") is not None else None,
                released_upto=str(raw["releasedUpTo"])[:64] if raw.get("releasedUpTo") is not None else None,
                expired=bool(raw.get("expired")),
                reason=str(raw.get("reason") or "")[:512],
                short_gpus=int(raw.get("shortGPUs") or 0),
                warned=bool(raw.get("warned")),
            )
        except (KeyError, TypeError, ValueError):
            return None
        if not 1 <= size <= MAX_GANG_SIZE or gpus < 0:
            return None
        return record


Records = dict[str, GangRecord]


def records_to_json(records: Records) -> list[dict[str, Any]]:
    return [records[key].as_json() for key in sorted(records)]


def records_from_json(raw: Any) -> Records:
    out: Records = {}
    for item in raw if isinstance(raw, list) else []:
        record = GangRecord.from_json(item)
        if record is not None:
            out[record.key] = record
    return out


@dataclass(frozen=True)
class Versioned:
    records: Records
    version: str


class GangStore(Protocol):
    def read(self, *, timeout: float | None = None) -> Versioned: ...

    def write(self, records: Records, version: str, *, timeout: float | None = None) -> bool: ...


class KubeGangStore:
    """Records in the cluster-scoped `GangLedger` object `kgwe-gangs` (`spec.gangs`): the kernel's record
    store (policies/kernel/records.py), whose `Conflict` is this contract's False."""

    def __init__(self, api: JsonApi, name: str = LEDGER_NAME) -> None:
        """`api`: the raw JSON client (webhook/cluster/kube_json.py `KubeJson`)."""
        place = ObjectPlace(f"/apis/{GROUP}/{VERSION}/{PLURAL}", name, f"{GROUP}/{VERSION}", KIND)
        self.records = RecordStore(api, place, Codec(_decode, _encode))

    def read(self, *, timeout: float | None = None) -> Versioned:
        try:
            found = self.records.read(timeout=timeout)
        except Unavailable as exc:
            raise GangStoreUnavailable(str(exc)) from exc
        return Versioned(found.value, found.version)

    def write(self, records: Records, version: str, *, timeout: float | None = None) -> bool:
        try:
            self.records.write(records, version, timeout=timeout)
        except Conflict:
            return False
        except Unavailable as exc:
            raise GangStoreUnavailable(str(exc)) from exc
        return True


def _decode(obj: dict[str, Any] | None) -> Records:
    return records_from_json(ObjectView(obj).spec.get("gangs"))


def _encode(records: Records, obj: dict[str, Any]) -> dict[str, Any]:
    obj["spec"] = {"gangs": records_to_json(records)}
    return obj
