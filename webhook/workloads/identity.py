"""Who asked for a pod: the workload's creator, carried to the pods its controller makes (issue 13, item 7).

Pods made by controllers reach admission as the controller (`system:serviceaccount:kube-system:
job-controller`), so tenancy by group and profile RBAC would judge the controller. At workload
admission the mutating webhook therefore writes, on every pod template, the output annotation
`kgwe.io/requested-by`: the requesting user, groups and namespace, HMAC-SHA256-signed with a key
only the webhook holds. The pods inherit it from the template. At pod admission, when the API
server's requester is one of the configured controller identities and the signature verifies for
the pod's namespace, tenancy and RBAC are evaluated for the signed user; in every other case for the
requester, and the annotation is removed (mutate) or refused (validate), unless it names exactly that
requester (a user creating a pod by hand from their own template gains nothing by it).

The annotation value is compact JSON: `{"v":1,"user":..,"groups":[..],"ns":..,"sig":hex}`; the
signature covers the canonical JSON of the other four fields, so neither the user, the groups nor
the namespace can be changed or moved to another namespace without the key.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass, replace
from typing import Any

import orjson

from policies.vocabulary.objects import pod_view
from webhook.admission.request import AdmissionRequest, UserInfo
from webhook.identity_key import IdentityKeyError
from webhook.intent import OUT_REQUESTED_BY

REQUESTED_BY = OUT_REQUESTED_BY
VIA_TEMPLATE = "template"
# The annotation is bounded like any input: a real one is a few hundred bytes.
MAX_ANNOTATION_CHARS = 8192
MAX_GROUPS = 64

@dataclass(frozen=True)
class Requester:
    """Who a pod (or template) is admitted for, and what its `kgwe.io/requested-by` must hold."""

    user: UserInfo
    annotation: str | None  # the value the object must carry; None: it must carry none
    via: str  # "template" when decided on (or created from) an admitted template, else ""
    inherited: bool  # True when `user` came from a verified annotation, not from the API server


class Signer:
    """Signs and verifies `kgwe.io/requested-by` values with one shared key."""

    def __init__(self, key: bytes) -> None:
        if len(key) < 16:
            raise IdentityKeyError("the requested-by signing key must hold at least 16 bytes")
        self._key = key

    def _mac(self, body: dict[str, Any]) -> str:
        canonical = orjson.dumps(body, option=orjson.OPT_SORT_KEYS)
        return hmac.new(self._key, canonical, hashlib.sha256).hexdigest()

    def sign(self, user: UserInfo, namespace: str) -> str:
        groups = sorted(dict.fromkeys(g for g in user.groups if isinstance(g, str)))[:MAX_GROUPS]
        body: dict[str, Any] = {"v": 1, "user": user.username, "groups": groups, "ns": namespace}
        return orjson.dumps({**body, "sig": self._mac(body)}, option=orjson.OPT_SORT_KEYS).decode()

    def verify(self, value: str, namespace: str) -> UserInfo | None:
        """The signed user when `value` is a genuine annotation for `namespace`, else None."""
        if not isinstance(value, str) or len(value) > MAX_ANNOTATION_CHARS:
            return None
        try:
            doc = orjson.loads(value)
        except orjson.JSONDecodeError:
            return None
        if not isinstance(doc, dict) or set(doc) != {"v", "user", "groups", "ns", "sig"} or doc["v"] != 1:
            return None
        user, groups, ns, sig = doc["user"], doc["groups"], doc["ns"], doc["sig"]
        if not (isinstance(user, str) and isinstance(ns, str) and isinstance(sig, str) and isinstance(groups, list)):
            return None
        if len(groups) > MAX_GROUPS or not all(isinstance(g, str) for g in groups):
            return None
        expected = self._mac({"v": 1, "user": user, "groups": groups, "ns": ns})
        if not hmac.compare_digest(expected, sig) or ns != namespace:
            return None
        return UserInfo(username=user, groups=list(groups))


class Identity:
    """The requester model: which identities are controllers, and the signer they are trusted through."""

    def __init__(self, signer: Signer, controllers: tuple[str, ...] | list[str]) -> None:
        self.signer = signer
        self.controllers = frozenset(controllers)

    def is_controller(self, user: UserInfo) -> bool:
        return user.username in self.controllers

    def signed_for_pod(self, request: AdmissionRequest, obj: dict[str, Any], admitted_owner: bool = True
                       ) -> Requester | None:
        """The signed requester of `obj`, when the API server's requester may act on it: a controller
        identity writing for an owner whose templates KGWE admits (`admitted_owner`), or the very user
        (name and groups) it names, who gains nothing by it.

        A controller also turns templates KGWE never saw into objects (the Kubeflow training operator's
        TFJob and MPIJob, KubeRay's RayService); a signature copied into one of those from another
        workload of the namespace must not make its pods someone else's. None: `for_pod`'s answer is the caller
        (`as_caller`)."""
        view = request.pod if obj is request.object else pod_view(obj)  # the view built at decode
        value = view.annotation(REQUESTED_BY)
        if value is None:
            return None
        user = self.signer.verify(value, request.namespace)
        if user is None:
            return None
        if self.is_controller(request.user):
            return Requester(user, value, VIA_TEMPLATE, True) if admitted_owner else None
        if _same_person(user, request.user):
            return Requester(request.user, value, VIA_TEMPLATE, False)
        return None

    def for_pod(self, request: AdmissionRequest, pod: dict[str, Any], admitted_owner: bool = True) -> Requester:
        """A pod's requester: the signed user for a controller-made pod from an admitted template (its
        controller owner, if any, of a kind whose templates KGWE admits: `admitted_owner`), else the
        caller (who keeps an annotation that names exactly them: a pod made by hand from their template)."""
        return self.signed_for_pod(request, pod, admitted_owner) or Requester(request.user, None, "", False)

    def for_template(
        self,
        request: AdmissionRequest,
        template: dict[str, Any],
        unchanged_from: dict[str, Any] | None,
        admitted_owner: bool = True,
    ) -> Requester:
        """A template's requester, and the annotation it must carry.

        A controller writing a workload (the Deployment controller's ReplicaSet, Kueue's update of a
        Job) keeps the signed creator when the workload's owner, if any, is of a kind KGWE admits
        (`admitted_owner`); so does anyone whose UPDATE leaves the template as it was
        (scaling a Deployment must not re-attribute, or roll out, its pods). Anyone else who writes a
        template becomes its requester.
        """
        inherited = self.signed_for_pod(request, template, admitted_owner)
        if inherited is not None:
            return inherited
        if unchanged_from is not None:
            value = pod_view(unchanged_from).annotation(REQUESTED_BY)
            user = self.signer.verify(value, request.namespace) if value is not None else None
            if user is not None and _without_requester(unchanged_from) == _without_requester(template):
                return Requester(user, value, VIA_TEMPLATE, True)
        return Requester(request.user, self.signer.sign(request.user, request.namespace), VIA_TEMPLATE, False)


def _same_person(signed: UserInfo, caller: UserInfo) -> bool:
    return signed.username == caller.username and sorted(set(signed.groups)) == sorted(set(caller.groups))


def _without_requester(template: dict[str, Any]) -> bytes:
    copy: dict[str, Any] = orjson.loads(orjson.dumps(template))
    notes = (copy.get("metadata") or {}).get("annotations")
    if isinstance(notes, dict):
        notes.pop(REQUESTED_BY, None)
    return orjson.dumps(copy, option=orjson.OPT_SORT_KEYS)


def as_caller(request: AdmissionRequest, made_from_template: bool) -> AdmissionRequest:
    """`with_requester(request, Requester(request.user, None, "", False), made_from_template)`: the request judged
    for its caller, who carries no annotation; without building the frozen `Requester` on every pod CREATE."""
    if request.requested_by is None and request.via == "" and made_from_template == request.made_from_template:
        return request
    return replace(request, requested_by=None, via="", made_from_template=made_from_template)


def with_requester(request: AdmissionRequest, requester: Requester, made_from_template: bool | None = None,
                   ) -> AdmissionRequest:
    """The request as admission judges it: tenancy and RBAC for `requester.user`; `made_from_template`, when given,
    set too (in the same copy: `replace` builds the request and its views anew)."""
    made = request.made_from_template if made_from_template is None else made_from_template
    if (
        requester.user is request.user
        and requester.annotation == request.requested_by
        and requester.via == request.via
        and made == request.made_from_template
    ):
        return request  # a pod asked for by its caller: nothing changes (the usual case)
    return replace(request, user=requester.user, requested_by=requester.annotation, via=requester.via,
                   made_from_template=made)
