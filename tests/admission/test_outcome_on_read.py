"""`ObjectOnRead` (webhook/admission/outcome.py): a remembered `/mutate` answer's mutated pod, decoded from its bytes
when first read, is the `Outcome` it stands for in every way a caller can tell."""

from __future__ import annotations

import dataclasses

import orjson

from webhook.admission.outcome import ObjectOnRead, Outcome

POD = {"apiVersion": "v1", "kind": "Pod", "metadata": {"generateName": "worker-", "labels": {"a": "b"}},
       "spec": {"containers": [{"name": "main", "resources": {"limits": {"nvidia.com/gpu": 1}}}]}}
PATCH = [{"op": "add", "path": "/metadata/labels/x", "value": "y"}]


def _on_read() -> ObjectOnRead:
    return ObjectOnRead(pod=orjson.dumps(POD), patch=list(PATCH), warnings=["w"])


def test_it_equals_the_outcome_it_stands_for() -> None:
    plain = Outcome(patch=list(PATCH), warnings=["w"], object=POD)
    assert _on_read() == plain and plain == _on_read()
    assert _on_read() != Outcome(patch=list(PATCH), warnings=["w"], object={})
    assert repr(_on_read()).removeprefix("ObjectOnRead") == repr(plain).removeprefix("Outcome")
    assert dataclasses.replace(_on_read(), warnings=[]) == Outcome(patch=list(PATCH), object=POD)


def test_the_object_read_is_one_dict_a_caller_may_change() -> None:
    outcome = _on_read()
    pod = outcome.object
    assert pod == POD and pod is not POD
    assert pod is not None
    pod["metadata"]["labels"]["c"] = "d"  # as a hook may: the change is the outcome's, as on a plain Outcome
    assert outcome.object is pod
    assert _on_read().object == POD  # another answer of the same bytes is not changed


def test_assigning_the_object_replaces_the_bytes() -> None:
    outcome = _on_read()
    outcome.object = {"kind": "Pod"}
    assert outcome.object == {"kind": "Pod"}
    outcome.object = None
    assert outcome.object is None
    assert ObjectOnRead().object is None
