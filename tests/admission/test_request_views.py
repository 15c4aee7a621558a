"""The typed views of `object` and `oldObject`, built at decode over the request's own dicts."""

from __future__ import annotations

import dataclasses

import orjson

from webhook.admission.request import decode_review


def _update_body(labels: object = None) -> bytes:
    # An UPDATE as kube-apiserver sends it: the new pod and the stored one.
    old = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "p", "namespace": "ml", "labels": {"kgwe.io/gang": "g"}},
        "spec": {"schedulingGates": [{"name": "kgwe.io/gang"}], "containers": [{"name": "main"}]},
    }
    new = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "p", "namespace": "ml", "labels": labels if labels is not None else {"app": "x"}},
        "spec": {"containers": [{"name": "main", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
    }
    return orjson.dumps({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": "u", "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "name": "p", "namespace": "ml", "operation": "UPDATE",
            "userInfo": {"username": "alice", "groups": ["system:authenticated"]},
            "object": new, "oldObject": old,
        },
    })


def test_decode_builds_views_over_the_request_objects() -> None:
    request = decode_review(_update_body())
    assert request.invalid is None
    assert request.object is not None and request.pod.raw is request.object
    assert request.old_pod.raw is request.old_object
    assert request.pod.labels == {"app": "x"}
    assert request.old_pod.scheduling_gates == ("kgwe.io/gang",)
    assert [c.limits for c in request.pod.containers] == [{"nvidia.com/gpu": "1"}]
    # The mutation pipeline edits `object` in place: the view reads the edit.
    request.object["metadata"]["annotations"] = {"kgwe.io/tenant": "team-a"}
    assert request.pod.annotation("kgwe.io/tenant") == "team-a"


def test_a_create_has_an_empty_old_pod() -> None:
    body = orjson.loads(_update_body())
    body["request"]["operation"] = "CREATE"
    body["request"]["oldObject"] = None
    request = decode_review(body)
    assert request.old_object is None
    assert request.old_pod.name == "" and request.old_pod.labels == {} and request.old_pod.containers == ()


def test_replacing_the_object_builds_new_views() -> None:
    """Workload admission judges each template as a pod with `dataclasses.replace`: its own views."""
    request = decode_review(_update_body())
    template_pod = {"metadata": {"namespace": "ml", "annotations": {"kgwe.io/accelerator": "a100-80gb"}}}
    pod_request = dataclasses.replace(request, object=template_pod, old_object=None)
    assert pod_request.pod.raw is template_pod
    assert pod_request.pod.annotation("kgwe.io/accelerator") == "a100-80gb"
    assert pod_request.old_pod.raw == {}
    assert request.pod.raw is request.object  # the original keeps its own


def test_a_hostile_object_is_refused_at_decode_and_its_view_still_reads_as_empty() -> None:
    request = decode_review(_update_body(labels=["kgwe.io/gang"]))
    assert request.invalid is not None and "labels" in request.invalid
    assert request.pod.labels == {}
