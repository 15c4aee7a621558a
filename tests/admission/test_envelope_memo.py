"""The memo of decoded envelopes (webhook/admission/request.py `_EnvelopeMemo`) keeps only what pays: bodies of
objects the API server has stamped (`metadata.uid`, sent to `/validate`, one of a kind) never push a controller's
replicas out, and a memo that finds nothing rests, then looks again. Whatever it keeps, each request decodes to what
its own body decodes to."""

from __future__ import annotations

import dataclasses
from typing import Any

import orjson

from webhook.admission import request as request_module
from webhook.admission.request import (
    _ENVELOPES_KEPT,
    _RESTING_REQUESTS,
    AdmissionRequest,
    _EnvelopeMemo,
    decode_review,
)


def _body(uid: str, name: str | None, stamped: bool) -> bytes:
    metadata: dict[str, Any] = {"generateName": "train-", "namespace": "ml"}
    if name is not None:
        metadata["name"] = name
    if stamped:
        metadata.update(uid=f"stamp-{name}", creationTimestamp="2026-11-30T06:00:00Z")
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": metadata,
           "spec": {"containers": [{"name": "main", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}
    return orjson.dumps({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {"uid": uid, "kind": {"group": "", "version": "v1", "kind": "Pod"},
                    "resource": {"group": "", "version": "v1", "resource": "pods"}, "namespace": "ml",
                    "name": name or "", "operation": "CREATE", "userInfo": {"username": "controller"},
                    "object": pod},
    })


def _seen(decoded: AdmissionRequest) -> dict[str, Any]:
    """Every field of a decoded request, its views by the objects they read."""
    return {f.name: getattr(decoded, f.name) for f in dataclasses.fields(decoded)} | {
        "pod": decoded.pod.raw, "old_pod": decoded.old_pod.raw, "invalid": decoded.invalid}


def _fields(body: bytes) -> dict[str, Any]:
    return _seen(decode_review(body))


def _fresh(body: bytes) -> dict[str, Any]:
    return _seen(decode_review(orjson.loads(body)))  # a dict: no memo


def test_stamped_bodies_do_not_push_replicas_out() -> None:
    replica = [_body(f"r-{i}", None, stamped=False) for i in range(3)]
    for body in replica:
        assert _fields(body) == _fresh(body)
    kept = dict(request_module._unstamped.kept)
    assert kept  # the replicas' envelope is kept
    for i in range(3 * _ENVELOPES_KEPT):  # /validate of as many named, stamped pods
        body = _body(f"v-{i}", f"train-{i:05d}", stamped=True)
        assert _fields(body) == _fresh(body)
    for i in range(3 * _ENVELOPES_KEPT):  # and as many DELETEs, whose old object exists already
        review = orjson.loads(_body(f"d-{i}", f"train-{i:05d}", stamped=True))
        review["request"].update(operation="DELETE", oldObject=review["request"].pop("object"))
        body = orjson.dumps(review)
        assert _fields(body) == _fresh(body)
    assert request_module._unstamped.kept.keys() >= kept.keys()
    for i in range(3):
        body = _body(f"r2-{i}", None, stamped=False)
        assert _fields(body) == _fresh(body)


def test_a_memo_that_finds_nothing_rests_then_looks_again() -> None:
    memo = _EnvelopeMemo()
    envelope = object()
    for i in range(_ENVELOPES_KEPT):
        memo.put((b"a%d" % i, b""), envelope)  # type: ignore[arg-type]
    assert memo.resting == 0 and len(memo.kept) == _ENVELOPES_KEPT
    memo.put((b"full", b""), envelope)  # type: ignore[arg-type]
    assert memo.resting == _RESTING_REQUESTS and not memo.kept  # nothing was found: it rests
    memo.resting = 0  # rested: it keeps again
    for i in range(_ENVELOPES_KEPT):
        memo.put((b"b%d" % i, b""), envelope)  # type: ignore[arg-type]
    memo.found = 1  # one was found among them
    memo.put((b"full", b""), envelope)  # type: ignore[arg-type]
    assert memo.resting == 0 and list(memo.kept) == [(b"full", b"")] and memo.found == 0


def test_requests_decode_to_their_own_bodies_while_a_memo_rests() -> None:
    memo = request_module._stamped
    memo.resting = 5
    for i in range(8):
        body = _body(f"v-{i}", "train-same", stamped=True)  # a replay: the same body but for the request uid
        assert _fields(body) == _fresh(body)
    assert memo.resting == 0 and memo.kept  # it looks again once rested, and keeps the replay's envelope
