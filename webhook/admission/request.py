"""AdmissionReview v1 requests as the API server sends them, decoded once into a typed view.

Only the envelope is validated as a model; `object` and `oldObject` stay plain dicts (they are
mutated by the pipeline and handed to policy engines as JSON). Their typed read-only views
(`AdmissionRequest.pod`, `.old_pod`, policies/vocabulary/objects.py) are built here, once, over those
same dicts: code downstream reads the view instead of digging in the dict.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson

from policies.vocabulary.objects import PodView
from webhook.admission.bounds import ObjectOutOfBounds, check_bounds, check_pod_shape
from webhook.admission.replica_bytes import uid_excised

API_VERSION = "admission.k8s.io/v1"
KIND = "AdmissionReview"


NO_POD = PodView(None)
OPERATIONS = frozenset({"CREATE", "UPDATE", "DELETE", "CONNECT"})
# Subresources of a pod judged like the pod itself (SPEC section 13): an ephemeral container added to a
# running pod (`kubectl debug --profile=sysadmin` adds a privileged one), and a status update, through
# which labels and annotations (the `kgwe.io/` keys quotas and costs read among them) can change too.
# Their reviews carry the whole pod as `object` and `oldObject`.
JUDGED_POD_SUBRESOURCES = frozenset({"", "ephemeralcontainers", "status"})


class BadReview(ValueError):
    """The body is not an AdmissionReview we can answer: HTTP 400 with this message."""


@dataclass
class UserInfo:
    username: str = ""
    uid: str = ""
    groups: list[str] = field(default_factory=list)
    extra: dict[str, list[str]] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"username": self.username, "uid": self.uid, "groups": self.groups, "extra": self.extra}


@dataclass
class AdmissionRequest:
    uid: str
    kind: dict[str, str]
    resource: dict[str, str]
    operation: str
    namespace: str
    name: str
    user: UserInfo
    object: dict[str, Any] | None
    old_object: dict[str, Any] | None
    dry_run: bool
    raw: dict[str, Any]  # the whole `request` as received
    api_version: str = API_VERSION
    sub_resource: str = ""
    # Why the object cannot be judged (out of bounds, or a shape the API server never sends): the
    # core refuses such a request with this message instead of deciding on it.
    invalid: str | None = None
    # Whether the caller proved to be the API server (docs/security.md). True when authentication is
    # not configured. A request that is not authenticated always has `dry_run` set: whatever answers
    # it, nothing is reserved or written for it.
    authenticated: bool = True
    # Set by workload admission (webhook/workloads): the pod is a workload's pod template, judged as a pod
    # made from it but charged to no quota (the pods' own admission is).
    template: bool = False
    # The `kgwe.io/requested-by` value the pod must carry (None: none) and how it was decided ("template").
    requested_by: str | None = None
    via: str = ""
    # Set by workload admission: the key of the workload a template's pods pool their usage under
    # (webhook/workload_owners.py `template_workload`); "" when it cannot be known.
    workload: str = ""
    # A pod CREATE whose controller owner is of a kind whose templates KGWE admits: its template was
    # judged (and rightsized) at the owner's admission, so the pod passes as it was made (SPEC section 7).
    made_from_template: bool = False
    # Views of `object` and `old_object` (of an empty object when absent), built with the request:
    # `dataclasses.replace` builds them anew for the new request's objects. They wrap the dicts, so
    # the mutation pipeline's changes to `object` show through; `object` itself is never reassigned.
    pod: PodView = field(init=False, repr=False, compare=False)
    old_pod: PodView = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.pod = PodView(self.object)
        # A CREATE has no old object: one shared view of nothing (views are read-only).
        self.old_pod = NO_POD if self.old_object is None else PodView(self.old_object)

    @property
    def is_pod(self) -> bool:
        return (
            self.kind.get("kind") == "Pod"
            and self.kind.get("group", "") == ""
            and self.sub_resource in JUDGED_POD_SUBRESOURCES
        )


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _user(raw: Any) -> UserInfo:
    if not isinstance(raw, dict):
        return UserInfo()
    groups = [g for g in raw.get("groups") or [] if isinstance(g, str)]
    extra_raw = raw.get("extra") or {}
    extra = {
        str(k): [str(x) for x in v] if isinstance(v, list) else [str(v)]
        for k, v in (extra_raw.items() if isinstance(extra_raw, dict) else [])
    }
    return UserInfo(_str(raw.get("username")), _str(raw.get("uid")), groups, extra)


def decode_review(body: bytes | dict[str, Any], *, authenticated: bool = True) -> AdmissionRequest:
    """Decode an AdmissionReview body; raise BadReview with a message saying what is wrong.

    `authenticated` is the HTTP shell's verdict on the caller; `False` makes the request dry-run.
    """
    if isinstance(body, dict):
        review = body
    else:
        try:
            review = orjson.loads(body)
        except orjson.JSONDecodeError as exc:
            raise BadReview(f"request body is not valid JSON: {exc}") from exc
    if not isinstance(review, dict):
        raise BadReview("request body must be a JSON object (an AdmissionReview)")
    api_version = review.get("apiVersion")
    if api_version != API_VERSION:
        raise BadReview(f"unsupported apiVersion {api_version!r}: KGWE speaks {API_VERSION}")
    if review.get("kind") != KIND:
        raise BadReview(f"unsupported kind {review.get('kind')!r}: expected {KIND}")
    request = review.get("request")
    if not isinstance(request, dict):
        raise BadReview("AdmissionReview has no request")
    uid = request.get("uid")
    if not isinstance(uid, str) or not uid:
        raise BadReview("AdmissionReview request has no uid")
    obj = request.get("object")
    old = request.get("oldObject")
    pod = obj if isinstance(obj, dict) else None
    old_pod = old if isinstance(old, dict) else None
    memo = None
    split = None
    if isinstance(body, bytes) and len(body) <= _KEPT_BODY_BYTES:
        metadata = pod.get("metadata") if pod is not None else None
        stamped = old_pod is not None or (isinstance(metadata, dict) and bool(metadata.get("uid")))
        memo = _stamped if stamped else _unstamped
        if memo.resting:
            memo.resting -= 1
        else:
            split = uid_excised(body, uid)
            kept = memo.kept.get(split) if split is not None else None
            if kept is not None:
                memo.found += 1
                return kept.request(uid, pod, old_pod, request, authenticated)
    kind = request.get("kind") if isinstance(request.get("kind"), dict) else {}
    resource = request.get("resource") if isinstance(request.get("resource"), dict) else {}
    _require_envelope(kind or {}, request.get("operation"), obj)
    envelope = _Envelope(
        kind={str(k): str(v) for k, v in (kind or {}).items()},
        resource={str(k): str(v) for k, v in (resource or {}).items()},
        operation=_str(request.get("operation")).upper(),
        namespace=_str(request.get("namespace")),
        name=_str(request.get("name")),
        user=_user(request.get("userInfo")),
        dry_run=bool(request.get("dryRun")),
        sub_resource=_str(request.get("subResource")),
    )
    decoded = envelope.request(uid, pod, old_pod, request, authenticated)
    envelope.invalid = decoded.invalid = _out_of_bounds(decoded, body)
    if memo is not None and split is not None:
        memo.put(split, envelope)
    return decoded


@dataclass(slots=True)
class _Envelope:
    """What a review decodes to but for its uid and its objects, with its bounds verdict: kept for replicas
    (`_EnvelopeMemo`), never handed out; each request gets copies of its parts."""

    kind: dict[str, str]
    resource: dict[str, str]
    operation: str
    namespace: str
    name: str
    user: UserInfo
    dry_run: bool  # as the body says: a caller that is not authenticated makes any request dry-run
    sub_resource: str
    invalid: str | None = None

    def request(self, uid: str, pod: dict[str, Any] | None, old_pod: dict[str, Any] | None, raw: dict[str, Any],
                authenticated: bool) -> AdmissionRequest:
        """The request of the review `raw` with this envelope, its own objects and uid.

        Built attribute by attribute in the constructor's order, its defaults (`api_version` to
        `made_from_template`) as the constructor would set them: the constructor's 20 arguments and
        `__post_init__` cost a replica more than its attributes, and setting them one by one (not handing over a
        `__dict__`) keeps them inline (an instance whose `__dict__` was handed to it or read reads every attribute
        about twice as slowly on Python 3.11). A field added to `AdmissionRequest` must be set here too: the
        request's `__eq__` reads every field."""
        user = self.user
        copied = _new(UserInfo)  # its four fields in the constructor's order, the lists copied: no constructor call
        copied.username = user.username
        copied.uid = user.uid
        copied.groups = list(user.groups)
        copied.extra = {k: list(v) for k, v in user.extra.items()} if user.extra else {}
        decoded = _new(AdmissionRequest)
        decoded.uid = uid
        decoded.kind = dict(self.kind)
        decoded.resource = dict(self.resource)
        decoded.operation = self.operation
        decoded.namespace = self.namespace
        decoded.name = self.name
        decoded.user = copied
        decoded.object = pod
        decoded.old_object = old_pod
        decoded.dry_run = self.dry_run or not authenticated
        decoded.raw = raw
        decoded.api_version = API_VERSION
        decoded.sub_resource = self.sub_resource
        decoded.invalid = self.invalid
        decoded.authenticated = authenticated
        decoded.template = False
        decoded.requested_by = None
        decoded.via = ""
        decoded.workload = ""
        decoded.made_from_template = False
        decoded.pod = PodView(pod)
        decoded.old_pod = NO_POD if old_pod is None else PodView(old_pod)
        return decoded


_new = object.__new__


# A review's body less its uid decodes to one `_Envelope` (webhook/admission/replica_bytes.py says why): kept under
# the bytes around the uid, for bodies up to a small size and a bounded number of them (a controller's replicas,
# never every large review).
_ENVELOPES_KEPT = 64
_KEPT_BODY_BYTES = 16 * 1024  # keys of 1 MiB at most in all, in each memo
# Requests a memo that found nothing for a whole memo's worth of bodies lets pass before it looks again.
_RESTING_REQUESTS = 4096


class _EnvelopeMemo:
    """Envelopes kept under their bodies' splits while keeping them pays.

    A replica's body repeats but for the request's uid only where the object has no identity of its own yet: what
    `/mutate` is sent for a controller's pods. An object the API server has stamped (`metadata.uid`: `/validate` of
    a CREATE, after the name of a `generateName` pod is made) or that exists already (an `oldObject`: every UPDATE
    and DELETE) is one of its kind, so its body never comes again but for a replay. Those bodies get a memo of their
    own, so that they never push the replicas' envelopes out; and a memo whose last `_ENVELOPES_KEPT` bodies found
    nothing stops splitting bodies (the split, its hash and the entry are 2-3 % of such a request) for
    `_RESTING_REQUESTS` requests, then tries again.
    """

    __slots__ = ("found", "kept", "resting")  # read by `decode_review` itself: the found path makes no call

    def __init__(self) -> None:
        self.kept: dict[tuple[bytes, bytes], _Envelope] = {}
        self.found = 0  # envelopes found since the memo was last emptied
        self.resting = 0

    def put(self, split: tuple[bytes, bytes], envelope: _Envelope) -> None:
        if len(self.kept) >= _ENVELOPES_KEPT:
            self.kept.clear()
            if not self.found:
                self.resting = _RESTING_REQUESTS
                return
            self.found = 0
        self.kept[split] = envelope


_unstamped = _EnvelopeMemo()
_stamped = _EnvelopeMemo()


def _require_envelope(kind: dict[Any, Any], operation: Any, obj: Any) -> None:
    """The API server always says what it asks about: a review without a kind, an operation, or (for
    CREATE and UPDATE) an object is no question KGWE may answer `allowed` to."""
    if not isinstance(kind.get("kind"), str) or not kind["kind"]:
        raise BadReview("AdmissionReview request has no kind")
    if not isinstance(operation, str) or operation not in OPERATIONS:
        raise BadReview(f"AdmissionReview request has no operation (one of {', '.join(sorted(OPERATIONS))})")
    if operation in ("CREATE", "UPDATE") and obj is None:
        raise BadReview(f"AdmissionReview request for {operation} has no object")


def _out_of_bounds(request: AdmissionRequest, body: bytes | dict[str, Any]) -> str | None:
    """The input bound the request breaks, if any (see webhook/admission/bounds.py)."""
    try:
        # Nesting cannot exceed the number of brackets: most reviews skip the walk.
        if not isinstance(body, bytes) or body.count(b"{") + body.count(b"[") > 60:
            check_bounds(request.raw)
        if request.is_pod:
            for name, value in (("object", request.object), ("oldObject", request.old_object)):
                if value is not None:
                    check_pod_shape(value, name)
            if request.raw.get("object") is not None and request.object is None:
                raise ObjectOutOfBounds("object must be a JSON object")
    except ObjectOutOfBounds as exc:
        return str(exc)
    return None
