"""A replica's decoded review, its bounds verdict among it, remembered under its body's bytes around the uid, is
what its own body decodes to: for replicas, for bodies that differ anywhere else, and for uids a hostile caller
picks to match other parts of the body (a key of the pod, a value, a number) or writes with escapes."""

from __future__ import annotations

import random
from typing import Any

import orjson

from webhook.admission.replica_bytes import uid_excised
from webhook.admission.request import NO_POD, _out_of_bounds, decode_review


def _pod(annotations: Any = None, limits: Any = None, containers: Any = None) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"generateName": "train-", "namespace": "ml", "annotations": annotations or {"team": "a"}},
        "spec": {"containers": containers if containers is not None else [
            {"name": "main", "resources": {"limits": limits or {"nvidia.com/gpu": "1", "cpu": 1}}}]},
    }


def _body(uid: str, pod: dict[str, Any]) -> bytes:
    return orjson.dumps({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": uid, "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": "ml", "operation": "CREATE",
            "userInfo": {"username": "system:serviceaccount:kube-system:replicaset-controller"},
            "object": pod,
        },
    })


def _fresh(body: bytes) -> str | None:
    """The verdict the body's own decoding gives, nothing remembered."""
    return _out_of_bounds(decode_review(orjson.loads(body)), body)


_PODS = [
    _pod(),
    _pod(annotations={"team": 1}),  # an annotation that is not a string
    _pod(limits={"nvidia.com/gpu": True}),  # a quantity that is a boolean
    _pod(limits={"nvidia.com/gpu": "1", "cpu": "annotations"}),
    _pod(annotations={"annotations": "x"}),
    _pod(containers={"main": {}}),  # containers as a mapping
    _pod(annotations={"team": "a", "u-1": {"nested": "x"}}),
]
# Uids that match other parts of these bodies: a key, a value, a number, the name of a checked part.
_UIDS = ["0b7f3c2e-1111-4a4a-9c9c-000000000001", "annotations", "team", "a", "1", "cpu", "limits", "main",
         "containers", "u-1", "true", "ml", "Pod", "v1", "x"]


def test_replicas_of_each_pod_get_the_verdict_of_their_own_body() -> None:
    for pod in _PODS:
        for uid in _UIDS:
            body = _body(uid, pod)
            assert decode_review(body).invalid == _fresh(body), (uid, pod)


def test_shuffled_replicas_and_hostile_uids_never_share_a_verdict_they_should_not() -> None:
    generator = random.Random(36)
    bodies = [_body(uid, pod) for pod in _PODS for uid in _UIDS]
    for _ in range(4):
        generator.shuffle(bodies)
        for body in bodies:
            assert decode_review(body).invalid == _fresh(body)


def test_a_uid_written_with_escapes_is_not_taken_for_a_key_of_the_pod() -> None:
    # The uid `annotations` spelled with an escape: its first plain token is the pod's annotations key. A body
    # alike but for that key (`zzzzzzzzzzz`) must be judged on its own, in either order.
    def escaped(key: str) -> bytes:
        pod = {**_pod(), "metadata": {key: "not a mapping"}}
        return _body("annotations", pod).replace(b'"uid":"annotations"', b'"uid":"\\u0061nnotations"')

    refused, passed = escaped("annotations"), escaped("zzzzzzzzzzz")
    assert b"\\u0061nnotations" in refused
    for first, second in ((refused, passed), (passed, refused), (refused, passed)):
        for body in (first, second):
            decoded = decode_review(body)
            assert decoded.uid == "annotations"
            assert decoded.invalid == _fresh(body)
    assert decode_review(refused).invalid == "object.metadata.annotations must be a JSON object"
    assert decode_review(passed).invalid is None


def test_the_split_is_around_the_uid_string_only_for_a_plain_uid() -> None:
    body = _body("abc-1", _pod())
    before, after = uid_excised(body, "abc-1") or (b"", b"")
    assert before + b'"abc-1"' + after == body
    assert uid_excised(body, "[[[") is None  # brackets: the walk's bracket count would differ
    assert uid_excised(body, 'a"b') is None
    assert uid_excised(body, "é") is None
    assert uid_excised(body, "") is None
    assert uid_excised(body.replace(b'"abc-1"', b'"\\u0061bc-1"'), "abc-1") is None  # written with an escape


def _fields(request: Any) -> dict[str, Any]:
    return {name: getattr(request, name) for name in (
        "uid", "kind", "resource", "operation", "namespace", "name", "user", "object", "old_object", "dry_run", "raw",
        "api_version", "sub_resource", "invalid", "authenticated")}


def test_a_replica_decodes_as_its_own_body_does_and_shares_nothing_with_the_one_before() -> None:
    pod = _pod()
    envelope = {"userInfo": {"username": "u", "groups": ["g"], "extra": {"scopes": ["a"]}}, "dryRun": False,
                "subResource": ""}
    def replica(uid: str) -> bytes:
        review = orjson.loads(_body(uid, pod))
        review["request"].update(envelope)
        return orjson.dumps(review)

    first = decode_review(replica("first-uid"))
    first.user.groups.append("system:masters")
    first.user.extra["scopes"].append("b")
    first.kind["kind"] = "Secret"
    for uid, authenticated in (("second-uid", True), ("third-uid", False), ("fourth-uid", True)):
        body = replica(uid)
        decoded = decode_review(body, authenticated=authenticated)
        assert _fields(decoded) == _fields(decode_review(orjson.loads(body), authenticated=authenticated))
        assert decoded.user.groups == ["g"] and decoded.user.extra == {"scopes": ["a"]}
        assert decoded.dry_run is not authenticated
        assert decoded.pod.raw is decoded.object


def test_a_replica_is_built_with_every_field_a_fresh_decoding_has() -> None:
    """Replicas are built from the first request's fields, not by the constructor: each must hold every attribute
    a decoded request (and its user) holds, with the same values, and views of its own objects."""
    for old in (None, _pod(annotations={"team": "b"})):
        review = orjson.loads(_body("uid-0", _pod()))
        review["request"]["userInfo"] = {"username": "u", "uid": "7", "groups": ["g", "h"],
                                         "extra": {"scopes": ["a", "b"]}}
        if old is not None:
            review["request"]["operation"] = "UPDATE"
            review["request"]["oldObject"] = old
        first = decode_review(orjson.dumps(review))
        first.user.groups.append("x")
        first.template = True
        for n in range(1, 4):
            review["request"]["uid"] = f"uid-{n}"
            body = orjson.dumps(review)
            decoded = decode_review(body, authenticated=n != 2)
            fresh = decode_review(orjson.loads(body), authenticated=n != 2)
            assert type(decoded) is type(fresh) and type(decoded.user) is type(fresh.user)
            assert vars(decoded).keys() == vars(fresh).keys()
            assert vars(decoded.user) == vars(fresh.user)
            assert decoded == fresh
            assert decoded.pod.raw is decoded.object
            if old is None:
                assert decoded.old_pod is NO_POD and decoded.old_object is None
            else:
                assert decoded.old_pod.raw is decoded.old_object and decoded.old_object == old
            assert decoded.user.groups is not first.user.groups
